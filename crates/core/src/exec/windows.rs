//! The exec on Windows: the same API and streaming contract as the unix one (`spawn.rs`), on a Job
//! object instead of a supervisor process.
//!
//! ```text
//! node ──CreateProcessW (suspended)──▶ shell ──▶ its children …   all in one Job object
//! ```
//!
//! - The shell is created suspended, put in a new Job object, then resumed: nothing it starts can
//!   run before it is in the job, and every descendant is born in the job (no breakaway is allowed).
//!   The job kills everything in it when its last handle closes (`JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`):
//!   if Node dies, the tree dies with it. `kill` terminates the job (`TerminateJobObject`).
//! - stdout and stderr are the same handle, the write end of one pipe, so chunks keep their order.
//!   The read end is a named pipe read with overlapped I/O, so one thread waits on the output, the
//!   shell's exit and a kill at once (`WaitForMultipleObjects`), as `poll` does on unix. A read is only
//!   issued once the consumer took the previous chunk: a slow consumer leaves the pipe full and the
//!   command blocked in its writes (backpressure).
//! - When the command finishes, the job's kill-on-close is lifted and its handle closed: background
//!   processes are left running, as pi (and the unix face) leave them.

use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use windows_sys::Win32::Foundation::{
    SetHandleInformation, ERROR_IO_PENDING, GENERIC_READ, GENERIC_WRITE, HANDLE,
    HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, WAIT_FAILED, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, ReadFile, WriteFile, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED,
    FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING, PIPE_ACCESS_INBOUND,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Pipes::{
    CreateNamedPipeW, CreatePipe, PIPE_READMODE_BYTE, PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE,
    PIPE_WAIT,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, CreateProcessW, DeleteProcThreadAttributeList, GetExitCodeProcess,
    InitializeProcThreadAttributeList, ResumeThread, SetEvent, Sleep, TerminateProcess,
    UpdateProcThreadAttribute, WaitForMultipleObjects, WaitForSingleObject, CREATE_NO_WINDOW,
    CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, EXTENDED_STARTUPINFO_PRESENT, INFINITE,
    LPPROC_THREAD_ATTRIBUTE_LIST, PROCESS_INFORMATION, PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
    STARTF_USESTDHANDLES, STARTUPINFOEXW,
};
use windows_sys::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};

use super::cmdline::{command_line, CmdlineError};
use super::preflight::{self, Ready, ShellKind};
use super::{ExecRequest, Outcome, MAX_CHUNK, OUTPUT_IDLE_GRACE};
use crate::error::{errno_of, Error};

/// Bytes the output pipe holds: the most a command writes ahead of a slow consumer before its
/// writes block. The size of a unix pipe's default buffer.
const PIPE_BYTES: u32 = 64 << 10;
/// The exit code of a shell whose tree was killed: what `taskkill /F` (pi's kill on Windows) leaves.
const KILLED_EXIT_CODE: u32 = 1;
/// After a kill, how long to wait for the job to report no process left, in milliseconds of
/// `Sleep(1)` polls: termination is asynchronous, and is normally over within a few. Past this the
/// exec ends anyway (the job handle, closed later, kills what is left).
const KILL_SETTLE_MS: u32 = 10_000;
/// Longest single wait while the idle grace runs, in milliseconds (the loop waits again until the
/// deadline): keeps the wait below `INFINITE`.
const WAIT_MAX_MS: u128 = 10_000;

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// `value` as a NUL-terminated UTF-16 string; `None` if it holds a NUL.
fn wide(value: &str) -> Option<Vec<u16>> {
    (!value.contains('\0')).then(|| value.encode_utf16().chain(std::iter::once(0)).collect())
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} must not contain NUL bytes"),
    )
}

/// Takes ownership of a handle a call just returned, or the call's error.
///
/// # Safety
///
/// `handle` must be a new handle owned by nobody else, or null / `INVALID_HANDLE_VALUE` on failure
/// (then `last_error` still holds the call's error).
unsafe fn owned(handle: HANDLE) -> io::Result<OwnedHandle> {
    if handle.is_null() || handle == INVALID_HANDLE_VALUE {
        return Err(last_error());
    }
    // SAFETY: per the contract, the handle is new and ours alone.
    Ok(unsafe { OwnedHandle::from_raw_handle(handle as RawHandle) })
}

fn raw(handle: &OwnedHandle) -> HANDLE {
    handle.as_raw_handle() as HANDLE
}

/// The environment block `CreateProcessW` takes (`CREATE_UNICODE_ENVIRONMENT`): `KEY=VALUE` entries
/// sorted by name case-insensitively (as Windows keeps its own, and as libuv passes them), each
/// NUL-terminated, then one more NUL.
fn environment_block(entries: &[String]) -> io::Result<Vec<u16>> {
    let mut sorted: Vec<&String> = entries.iter().collect();
    let name = |entry: &str| {
        // A leading `=` belongs to the name (`=C:` entries), as Windows reads them.
        let cut = entry[1.min(entry.len())..]
            .find('=')
            .map_or(entry.len(), |i| i + 1);
        entry[..cut].to_uppercase()
    };
    sorted.sort_by_cached_key(|entry| name(entry));
    let mut block = Vec::new();
    for entry in sorted {
        if entry.contains('\0') {
            return Err(invalid("environment entries"));
        }
        block.extend(entry.encode_utf16());
        block.push(0);
    }
    if block.is_empty() {
        block.push(0);
    }
    block.push(0);
    Ok(block)
}

/// A name for this exec's output pipe, unique in this session.
fn pipe_name() -> Vec<u16> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!(
        r"\\.\pipe\pi-native-ops-exec-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    wide(&name).expect("no NUL in the pipe name")
}

/// The output pipe: (our overlapped read end, the child's write end, not yet inheritable).
fn output_pipe() -> io::Result<(OwnedHandle, OwnedHandle)> {
    let name = pipe_name();
    // SAFETY: `name` is NUL-terminated; no security attributes (the default, not inheritable).
    let read = unsafe {
        owned(CreateNamedPipeW(
            name.as_ptr(),
            PIPE_ACCESS_INBOUND | FILE_FLAG_OVERLAPPED | FILE_FLAG_FIRST_PIPE_INSTANCE,
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
            1,
            0,
            PIPE_BYTES,
            0,
            ptr::null(),
        ))?
    };
    // SAFETY: as above; the pipe instance just made is the one this opens (one instance only).
    let write = unsafe {
        owned(CreateFileW(
            name.as_ptr(),
            GENERIC_WRITE,
            0,
            ptr::null(),
            OPEN_EXISTING,
            0,
            ptr::null_mut(),
        ))?
    };
    Ok((read, write))
}

/// The `NUL` device, for the shell's standard input (pi's `stdio: "ignore"`).
fn null_input() -> io::Result<OwnedHandle> {
    let name = wide("NUL").expect("static");
    // SAFETY: `name` is NUL-terminated; default security.
    unsafe {
        owned(CreateFileW(
            name.as_ptr(),
            GENERIC_READ,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            ptr::null(),
            OPEN_EXISTING,
            0,
            ptr::null_mut(),
        ))
    }
}

/// An anonymous pipe for a command given on standard input: (read end for the child, write end).
fn input_pipe() -> io::Result<(OwnedHandle, OwnedHandle)> {
    let mut read: HANDLE = ptr::null_mut();
    let mut write: HANDLE = ptr::null_mut();
    // SAFETY: two valid out-pointers; default security.
    if unsafe { CreatePipe(&mut read, &mut write, ptr::null(), 0) } == 0 {
        return Err(last_error());
    }
    // SAFETY: both handles were just created and are ours alone.
    unsafe { Ok((owned(read)?, owned(write)?)) }
}

fn set_inheritable(handle: &OwnedHandle, inherit: bool) -> io::Result<()> {
    let flags = if inherit { HANDLE_FLAG_INHERIT } else { 0 };
    // SAFETY: a handle we own.
    if unsafe { SetHandleInformation(raw(handle), HANDLE_FLAG_INHERIT, flags) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// A Job object that kills its processes when its last handle closes.
fn kill_on_close_job() -> io::Result<OwnedHandle> {
    // SAFETY: an unnamed job with default security.
    let job = unsafe { owned(CreateJobObjectW(ptr::null(), ptr::null()))? };
    set_kill_on_close(&job, true)?;
    Ok(job)
}

fn set_kill_on_close(job: &OwnedHandle, on: bool) -> io::Result<()> {
    // SAFETY: all-zero is a valid value of this plain C struct (no limits).
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    if on {
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    }
    // SAFETY: `limits` is the struct this information class takes, with its size.
    let ok = unsafe {
        SetInformationJobObject(
            raw(job),
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    };
    if ok == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// How many processes the job still has; `None` if the job cannot say.
fn active_processes(job: &OwnedHandle) -> Option<u32> {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is the struct this information class fills, with its size.
    let ok = unsafe {
        QueryInformationJobObject(
            raw(job),
            JobObjectBasicAccountingInformation,
            (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
            ptr::null_mut(),
        )
    };
    (ok != 0).then_some(info.ActiveProcesses)
}

/// A `PROC_THREAD_ATTRIBUTE_HANDLE_LIST`: the only handles the shell inherits, whatever else in
/// this process is inheritable at the moment it is created (libuv's spawns make their own pipes
/// inheritable while they run).
struct HandleList {
    buffer: Vec<usize>,
    handles: Box<[HANDLE]>,
}

impl HandleList {
    fn new(handles: &[HANDLE]) -> io::Result<HandleList> {
        let mut size = 0usize;
        // SAFETY: the documented size query (null list); it fails with the size filled in.
        unsafe { InitializeProcThreadAttributeList(ptr::null_mut(), 1, 0, &mut size) };
        // usize-aligned storage of at least `size` bytes.
        let mut buffer = vec![0usize; size.div_ceil(std::mem::size_of::<usize>()).max(1)];
        let list = buffer.as_mut_ptr() as LPPROC_THREAD_ATTRIBUTE_LIST;
        // SAFETY: `buffer` holds `size` bytes, as the query asked.
        if unsafe { InitializeProcThreadAttributeList(list, 1, 0, &mut size) } == 0 {
            return Err(last_error());
        }
        let mut this = HandleList {
            buffer,
            handles: handles.into(),
        };
        // SAFETY: the list was initialised above; `handles` is boxed, so its address is stable for
        // as long as the list (it lives in the same struct).
        let ok = unsafe {
            UpdateProcThreadAttribute(
                this.list(),
                0,
                PROC_THREAD_ATTRIBUTE_HANDLE_LIST as usize,
                this.handles.as_ptr().cast(),
                std::mem::size_of_val(&*this.handles),
                ptr::null_mut(),
                ptr::null(),
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        Ok(this)
    }

    fn list(&mut self) -> LPPROC_THREAD_ATTRIBUTE_LIST {
        self.buffer.as_mut_ptr() as LPPROC_THREAD_ATTRIBUTE_LIST
    }
}

impl Drop for HandleList {
    fn drop(&mut self) {
        // SAFETY: the list was initialised in `new` (a `HandleList` exists only then).
        unsafe { DeleteProcThreadAttributeList(self.list()) };
    }
}

/// Node's side of a running command's tree. Dropping the last handle on the job kills the tree,
/// unless the command finished (`detach`).
pub struct Control {
    /// The job; `None` once detached.
    job: Mutex<Option<OwnedHandle>>,
    /// Set by `kill`, wakes the pump.
    kill_event: OwnedHandle,
    killed: AtomicBool,
}

impl Control {
    /// Kill the whole tree (idempotent; a no-op once the exec has finished).
    pub fn kill(&self) {
        if self.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(guard) = self.job.lock() {
            if let Some(job) = guard.as_ref() {
                // A failure leaves the job to kill-on-close when the execution drops it.
                // SAFETY: a job handle we own.
                unsafe { TerminateJobObject(raw(job), KILLED_EXIT_CODE) };
            }
        }
        // SAFETY: an event handle we own.
        unsafe { SetEvent(raw(&self.kill_event)) };
    }

    fn killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Let background processes live on: lift kill-on-close, then let the job go.
    fn detach(&self) {
        if let Ok(mut guard) = self.job.lock() {
            if let Some(job) = guard.take() {
                if self.killed() || set_kill_on_close(&job, false).is_err() {
                    // Killed, or the limit cannot be lifted: closing the handle kills what is left.
                    // SAFETY: a job handle we own.
                    unsafe { TerminateJobObject(raw(&job), KILLED_EXIT_CODE) };
                }
            }
        }
    }

    /// Waits until the job has no process left (bounded by `KILL_SETTLE_MS`).
    fn settle(&self) {
        let Ok(guard) = self.job.lock() else { return };
        let Some(job) = guard.as_ref() else { return };
        for _ in 0..KILL_SETTLE_MS {
            if active_processes(job).is_none_or(|n| n == 0) {
                return;
            }
            // SAFETY: plain sleep.
            unsafe { Sleep(1) };
        }
    }
}

/// One overlapped read on the output pipe: its buffer and `OVERLAPPED` stay put (boxed) while the
/// system may write to them.
struct Read {
    overlapped: OVERLAPPED,
    event: OwnedHandle,
    buffer: Vec<u8>,
    pending: bool,
}

/// A running command.
pub struct Execution {
    output: OwnedHandle,
    read: Box<Read>,
    process: OwnedHandle,
    control: Arc<Control>,
    /// The shell as resolved (what a spawn error names).
    shell: String,
}

// SAFETY: the raw pointers inside (`OVERLAPPED`'s event handle) are handles this execution owns; the
// execution is used by one thread at a time (`&mut self` for every operation that touches them).
unsafe impl Send for Execution {}

/// Starts `[shell, "-c", command]` in a Job object, after the preflight (pi's missing-shell and
/// missing-cwd refusals, Windows' shell lookup). Fails before anything runs as Node's `spawn`
/// does (`spawn <shell> ENOENT`, `EACCES`). A sandbox is not available on Windows.
pub fn spawn(request: &ExecRequest) -> Result<Execution, Error> {
    spawn_shell(request, ShellKind::Bash)
}

/// As [`spawn`], for pi's shell tool `kind`.
pub fn spawn_shell(request: &ExecRequest, kind: ShellKind) -> Result<Execution, Error> {
    if request.sandbox.is_some() {
        return Err(Error::sandbox_unavailable(
            "the bash sandbox needs Linux (namespaces or Landlock); none on Windows",
        ));
    }
    let ready = preflight::check_kind(request, kind)?;
    start(request, &ready).map_err(|e| Error::spawn(&ready.shell, errno_of(&e)))
}

fn start(request: &ExecRequest, ready: &Ready) -> io::Result<Execution> {
    let mut args: Vec<&str> = ready.args.iter().map(String::as_str).collect();
    if !ready.command_on_stdin {
        args.push(&ready.command);
    }
    let mut line: Vec<u16> = match command_line(&ready.shell, &args) {
        Ok(line) => wide(&line).ok_or_else(|| invalid("command"))?,
        Err(CmdlineError::Nul) => return Err(invalid("command")),
        Err(CmdlineError::QuoteInProgram) => {
            return Err(io::Error::from_raw_os_error(
                windows_sys::Win32::Foundation::ERROR_INVALID_NAME as i32,
            ))
        }
    };
    let application = wide(&ready.shell).ok_or_else(|| invalid("the shell path"))?;
    let cwd = wide(&ready.cwd).ok_or_else(|| invalid("cwd"))?;
    let environment = match &request.env {
        Some(entries) => Some(environment_block(entries)?),
        None => None,
    };

    let (output, output_write) = output_pipe()?;
    let (stdin_child, stdin_feed) = if ready.command_on_stdin {
        let (read, write) = input_pipe()?;
        (read, Some(write))
    } else {
        (null_input()?, None)
    };
    let job = kill_on_close_job()?;
    // SAFETY: a manual-reset event, initially unset, unnamed.
    let kill_event = unsafe { owned(CreateEventW(ptr::null(), 1, 0, ptr::null()))? };
    // SAFETY: as above, for the read's completion.
    let read_event = unsafe { owned(CreateEventW(ptr::null(), 1, 0, ptr::null()))? };

    // The two handles the shell inherits, and only those (the list), inheritable only for the
    // call: a spawn elsewhere in this process in the meantime cannot take them along.
    let inherited = [raw(&stdin_child), raw(&output_write)];
    let mut handle_list = HandleList::new(&inherited)?;
    set_inheritable(&stdin_child, true)?;
    set_inheritable(&output_write, true)?;
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut startup: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
    startup.StartupInfo.cb = std::mem::size_of::<STARTUPINFOEXW>() as u32;
    startup.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    startup.StartupInfo.hStdInput = raw(&stdin_child);
    startup.StartupInfo.hStdOutput = raw(&output_write);
    startup.StartupInfo.hStdError = raw(&output_write);
    startup.lpAttributeList = handle_list.list();
    // SAFETY: as above.
    let mut info: PROCESS_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: every string is NUL-terminated and outlives the call; `line` is mutable as the call
    // requires; the environment block is in the form `CREATE_UNICODE_ENVIRONMENT` says; `startup`
    // is a `STARTUPINFOEXW` (`EXTENDED_STARTUPINFO_PRESENT`) whose attribute list lives in
    // `handle_list`.
    let created = unsafe {
        CreateProcessW(
            application.as_ptr(),
            line.as_mut_ptr(),
            ptr::null(),
            ptr::null(),
            1,
            CREATE_SUSPENDED
                | CREATE_UNICODE_ENVIRONMENT
                | CREATE_NO_WINDOW
                | EXTENDED_STARTUPINFO_PRESENT,
            environment
                .as_ref()
                .map_or(ptr::null(), |block| block.as_ptr().cast()),
            cwd.as_ptr(),
            &startup.StartupInfo,
            &mut info,
        )
    };
    let create_error = (created == 0).then(last_error);
    // Failing to clear the flag only matters until the handles close, just below.
    let _ = set_inheritable(&stdin_child, false);
    let _ = set_inheritable(&output_write, false);
    drop(handle_list);
    if let Some(e) = create_error {
        return Err(e);
    }
    // SAFETY: both handles were just returned by `CreateProcessW` and are ours alone.
    let (process, thread) = unsafe { (owned(info.hProcess)?, owned(info.hThread)?) };
    // SAFETY: handles we own; the process is still suspended, so nothing of it has run yet.
    if unsafe { AssignProcessToJobObject(raw(&job), raw(&process)) } == 0 {
        let e = last_error();
        // SAFETY: as above.
        unsafe { TerminateProcess(raw(&process), KILLED_EXIT_CODE) };
        return Err(e);
    }
    // SAFETY: the suspended main thread we own.
    if unsafe { ResumeThread(raw(&thread)) } == u32::MAX {
        let e = last_error();
        // SAFETY: a job handle we own.
        unsafe { TerminateJobObject(raw(&job), KILLED_EXIT_CODE) };
        return Err(e);
    }
    drop(thread);
    // Our copies of the child's ends: end-of-file on the output means every writer is gone.
    drop((output_write, stdin_child));

    if let Some(write) = stdin_feed {
        // Not joined: a background process that inherited the shell's stdin could keep the write
        // blocked; the thread ends when the pipe's last reader does.
        let command = ready.command.clone().into_bytes();
        std::thread::Builder::new()
            .name("pi-native-ops-exec-stdin".into())
            .spawn(move || write_all(&write, &command))?;
    }
    Ok(Execution {
        output,
        read: Box::new(Read {
            // SAFETY: all-zero is a valid, idle `OVERLAPPED`.
            overlapped: unsafe { std::mem::zeroed() },
            event: read_event,
            buffer: Vec::with_capacity(MAX_CHUNK),
            pending: false,
        }),
        process,
        control: Arc::new(Control {
            job: Mutex::new(Some(job)),
            kill_event,
            killed: AtomicBool::new(false),
        }),
        shell: ready.shell.clone(),
    })
}

/// Writes all of `data` to the (blocking) pipe `handle`, then lets it close; a shell that exits
/// without reading it all ends the write (broken pipe).
fn write_all(handle: &OwnedHandle, mut data: &[u8]) {
    while !data.is_empty() {
        let mut written = 0u32;
        let len = data.len().min(u32::MAX as usize) as u32;
        // SAFETY: writes at most `len` bytes from the live slice `data`; synchronous handle.
        let ok = unsafe {
            WriteFile(
                raw(handle),
                data.as_ptr(),
                len,
                &mut written,
                ptr::null_mut(),
            )
        };
        if ok == 0 || written == 0 {
            return;
        }
        data = &data[written as usize..];
    }
}

/// What one completed read gave.
enum ReadResult {
    Data(Vec<u8>),
    Eof,
}

impl Execution {
    /// The shell as resolved by the preflight.
    pub fn shell(&self) -> &str {
        &self.shell
    }

    /// The handle that kills this execution from any thread.
    pub fn control(&self) -> Arc<Control> {
        Arc::clone(&self.control)
    }

    /// Issues the next overlapped read, unless one is pending. `Some` when it completed at once.
    fn issue_read(&mut self) -> Option<ReadResult> {
        if self.read.pending {
            return None;
        }
        let read = &mut *self.read;
        // SAFETY: all-zero is an idle `OVERLAPPED`; its event is ours (reset by the read itself).
        read.overlapped = unsafe { std::mem::zeroed() };
        read.overlapped.hEvent = raw(&read.event);
        read.buffer.clear();
        let mut got = 0u32;
        // SAFETY: the buffer's spare capacity (MAX_CHUNK bytes) and the `OVERLAPPED` live in the
        // boxed `Read`, which stays put and is not touched until the read completes or is cancelled
        // and waited for (`finish_read`, `Drop`).
        let ok = unsafe {
            ReadFile(
                raw(&self.output),
                read.buffer.as_mut_ptr(),
                MAX_CHUNK as u32,
                &mut got,
                &mut read.overlapped,
            )
        };
        if ok != 0 {
            // Completed at once; its completion is also signalled on the event, which we reset by
            // starting the next read.
            return Some(self.completed(got));
        }
        let e = last_error();
        if e.raw_os_error() == Some(ERROR_IO_PENDING as i32) {
            self.read.pending = true;
            return None;
        }
        Some(ReadResult::Eof) // broken pipe (no writer left) or a failure: no more output
    }

    fn completed(&mut self, got: u32) -> ReadResult {
        if got == 0 {
            // A zero-byte message cannot come from a byte pipe's writers: treat as no data.
            return ReadResult::Data(Vec::new());
        }
        // SAFETY: the system wrote `got` bytes into the buffer's spare capacity.
        unsafe { self.read.buffer.set_len(got as usize) };
        ReadResult::Data(std::mem::replace(
            &mut self.read.buffer,
            Vec::with_capacity(MAX_CHUNK),
        ))
    }

    /// The result of the pending read, which has completed (its event is set).
    fn finish_read(&mut self) -> ReadResult {
        self.read.pending = false;
        let mut got = 0u32;
        // SAFETY: the `OVERLAPPED` of the read on this handle; `bWait` false, it has completed.
        let ok =
            unsafe { GetOverlappedResult(raw(&self.output), &self.read.overlapped, &mut got, 0) };
        if ok == 0 {
            // Broken pipe (no writer left), or a failed read: no more output either way.
            return ReadResult::Eof;
        }
        self.completed(got)
    }

    /// Cancels a pending read and waits until the system no longer touches its buffer.
    fn cancel_read(&mut self) {
        if !self.read.pending {
            return;
        }
        let mut got = 0u32;
        // SAFETY: cancels our own read, then waits (`bWait` true) for it to complete, cancelled or
        // not, so the buffer and `OVERLAPPED` are ours again.
        unsafe {
            CancelIoEx(raw(&self.output), &self.read.overlapped);
            GetOverlappedResult(raw(&self.output), &self.read.overlapped, &mut got, 1);
        }
        self.read.pending = false;
    }

    fn exit_code(&self) -> Option<i32> {
        let mut code = 0u32;
        // SAFETY: a process handle we own.
        if unsafe { GetExitCodeProcess(raw(&self.process), &mut code) } == 0 {
            return None;
        }
        // As the unix face's `i32`: an NTSTATUS code (0xC0000005) shows negative.
        Some(code as i32)
    }

    /// Streams output to `sink` until the exec is over, then returns how it ended. `sink` may
    /// block (that is the backpressure: no read is issued meanwhile); returning `false` kills the
    /// tree and stops delivery.
    pub fn pump(&mut self, sink: &mut dyn FnMut(Vec<u8>) -> bool) -> Outcome {
        let mut exit_code = None;
        let mut shell_exited = false;
        let mut output_open = true;
        let mut idle_deadline = Instant::now();
        loop {
            let killed = self.control.killed();
            if killed {
                break;
            }
            if shell_exited && (!output_open || Instant::now() >= idle_deadline) {
                break;
            }
            if output_open {
                match self.issue_read() {
                    Some(ReadResult::Data(chunk)) => {
                        if !chunk.is_empty() {
                            if shell_exited {
                                idle_deadline = Instant::now() + OUTPUT_IDLE_GRACE;
                            }
                            if !(self.control.killed() || sink(chunk)) {
                                self.control.kill();
                            }
                        }
                        continue;
                    }
                    Some(ReadResult::Eof) => {
                        output_open = false;
                        continue;
                    }
                    None => {}
                }
            }
            // [kill, process, read]: the kill first, so a kill is never starved by output.
            let mut handles = [
                raw(&self.control.kill_event),
                ptr::null_mut(),
                ptr::null_mut(),
            ];
            let mut count = 1usize;
            let process_slot = (!shell_exited).then(|| {
                handles[count] = raw(&self.process);
                count += 1;
                count - 1
            });
            let read_slot = (output_open && self.read.pending).then(|| {
                handles[count] = raw(&self.read.event);
                count += 1;
                count - 1
            });
            let timeout = if shell_exited {
                let left = idle_deadline.saturating_duration_since(Instant::now());
                // Rounded up: waking a fraction of a millisecond early would spin.
                left.as_millis().min(WAIT_MAX_MS) as u32 + 1
            } else {
                INFINITE
            };
            // SAFETY: `count` valid handles we own.
            let woke =
                unsafe { WaitForMultipleObjects(count as u32, handles.as_ptr(), 0, timeout) };
            if woke == WAIT_TIMEOUT {
                continue;
            }
            if woke == WAIT_FAILED {
                self.control.kill();
                break;
            }
            let slot = woke.wrapping_sub(WAIT_OBJECT_0) as usize;
            if Some(slot) == process_slot {
                exit_code = self.exit_code();
                shell_exited = true;
                idle_deadline = Instant::now() + OUTPUT_IDLE_GRACE;
            } else if Some(slot) == read_slot {
                match self.finish_read() {
                    ReadResult::Data(chunk) => {
                        if !chunk.is_empty() {
                            if shell_exited {
                                idle_deadline = Instant::now() + OUTPUT_IDLE_GRACE;
                            }
                            if !(self.control.killed() || sink(chunk)) {
                                self.control.kill();
                            }
                        }
                    }
                    ReadResult::Eof => output_open = false,
                }
            }
        }
        let killed = self.control.killed();
        // A killed tree's leftovers are not delivered; a read still pending is given up.
        self.cancel_read();
        if killed {
            // SAFETY: a process handle we own; the job was terminated, so the wait ends.
            unsafe { WaitForSingleObject(raw(&self.process), INFINITE) };
            if exit_code.is_none() {
                exit_code = self.exit_code();
            }
            self.control.settle();
        }
        self.control.detach();
        Outcome { exit_code, killed }
    }
}

impl Drop for Execution {
    /// Unless `pump` finished (and detached), kills the tree; gives up a pending read first.
    fn drop(&mut self) {
        self.cancel_read();
        if let Ok(mut guard) = self.control.job.lock() {
            if let Some(job) = guard.take() {
                // SAFETY: a job handle we own (closing it would kill too; this is immediate).
                unsafe { TerminateJobObject(raw(&job), KILLED_EXIT_CODE) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bash the tests run: `PI_NATIVE_OPS_WIN_BASH` (scripts/test-windows.sh: brush-shell under
    /// wine), else none, and the test says so and passes (a Windows machine without it has no bash).
    fn bash() -> Option<String> {
        let shell = std::env::var("PI_NATIVE_OPS_WIN_BASH")
            .ok()
            .filter(|s| !s.is_empty());
        if shell.is_none() {
            eprintln!("PI_NATIVE_OPS_WIN_BASH is not set: no bash to run");
        }
        shell
    }

    fn request(shell: &str, command: &str) -> ExecRequest {
        ExecRequest {
            shell: Some(shell.into()),
            command: command.into(),
            cwd: std::env::temp_dir().to_string_lossy().into_owned(),
            cwd_map: None,
            env: None,
            sandbox: None,
            events: None,
        }
    }

    #[test]
    fn output_is_one_ordered_stream_and_the_exit_code_comes_back() {
        let Some(shell) = bash() else { return };
        let mut execution = spawn(&request(
            &shell,
            "echo out; echo err >&2; echo again; exit 3",
        ))
        .unwrap();
        let mut output = Vec::new();
        let outcome = execution.pump(&mut |chunk| {
            output.extend(chunk);
            true
        });
        assert_eq!(output, b"out\nerr\nagain\n");
        assert_eq!(
            outcome,
            Outcome {
                exit_code: Some(3),
                killed: false
            }
        );
    }

    #[test]
    fn the_environment_is_exactly_the_given_one() {
        let Some(shell) = bash() else { return };
        // PI_NATIVE_OPS_WIN_BASH is in this process's environment, not in the given one. (Not PATH:
        // wine fills in the system's variables a block lacks.)
        let mut req = request(&shell, "echo \"[$FOO][${PI_NATIVE_OPS_WIN_BASH-unset}]\"");
        req.env = Some(vec!["FOO=bar baz".into()]);
        let mut execution = spawn(&req).unwrap();
        let mut output = Vec::new();
        execution.pump(&mut |chunk| {
            output.extend(chunk);
            true
        });
        assert_eq!(String::from_utf8_lossy(&output), "[bar baz][unset]\n");
    }

    #[test]
    fn kill_ends_a_running_tree_and_the_pump_returns() {
        let Some(shell) = bash() else { return };
        let command = "echo started; cmd /c \"ping -n 1000 127.0.0.1 >NUL\"; echo not reached";
        let mut execution = spawn(&request(&shell, command)).unwrap();
        let control = execution.control();
        let mut output = Vec::new();
        let outcome = execution.pump(&mut |chunk| {
            output.extend(chunk);
            if output.starts_with(b"started") {
                control.kill();
            }
            true
        });
        assert!(outcome.killed);
        assert_eq!(outcome.exit_code, Some(KILLED_EXIT_CODE as i32));
        assert_eq!(output, b"started\n");
    }

    #[test]
    fn a_consumer_that_gives_up_kills_the_tree() {
        let Some(shell) = bash() else { return };
        let command = "echo first; cmd /c \"ping -n 1000 127.0.0.1 >NUL\"";
        let mut execution = spawn(&request(&shell, command)).unwrap();
        let outcome = execution.pump(&mut |_| false);
        assert!(outcome.killed);
    }

    #[test]
    fn a_missing_shell_and_cwd_are_pis_refusals() {
        let err = spawn(&request(r"C:\no\such\bash.exe", "echo"))
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            r"Custom shell path not found: C:\no\such\bash.exe"
        );
        let Some(shell) = bash() else { return };
        let mut req = request(&shell, "echo");
        req.cwd = r"C:\no\such\dir".into();
        let err = spawn(&req).err().unwrap();
        assert_eq!(
            err.to_string(),
            "Working directory does not exist: C:\\no\\such\\dir\nCannot execute bash commands."
        );
    }

    #[test]
    fn wsl_legacy_bash_is_recognised_as_pi_recognises_it() {
        let root = std::env::var("SystemRoot").unwrap_or_else(|_| r"C:\windows".into());
        assert!(preflight::is_legacy_wsl_bash(&format!(
            r"{root}\System32\bash.exe"
        )));
        assert!(preflight::is_legacy_wsl_bash(&format!(
            r"{root}/sysnative/BASH.EXE"
        )));
        assert!(!preflight::is_legacy_wsl_bash(
            r"C:\Program Files\Git\bin\bash.exe"
        ));
    }

    #[test]
    fn the_environment_block_is_sorted_and_double_terminated() {
        let block = environment_block(&["b=2".into(), "A=1".into(), "=C:=C:\\x".into()]).unwrap();
        let text = String::from_utf16(&block).unwrap();
        assert_eq!(text, "=C:=C:\\x\0A=1\0b=2\0\0");
        assert_eq!(environment_block(&[]).unwrap(), vec![0, 0]);
        assert!(environment_block(&["A=\0".into()]).is_err());
    }
}
