//! What this machine offers the sandbox (`support()`): the kernel, Landlock's ABI, seccomp and
//! user notification, and namespaces proved by running a sandboxed `:`; so it sits above `spawn`,
//! which nothing below it calls.

use std::sync::OnceLock;

use super::landlock;
use super::plan::seccomp_available;
use super::setup::userns_hint;
use super::{Mode, Sandbox, Support};

/// What this machine offers; probed once per process (namespaces by running a sandboxed `:`).
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(probe).clone()
}

fn probe() -> Support {
    let (landlock_abi, landlock_error) = match landlock::abi() {
        Ok(abi) => (abi, None),
        Err(why) => (0, Some(why)),
    };
    Support {
        platform: std::env::consts::OS,
        kernel: kernel_release(),
        namespaces: probe_namespaces(),
        landlock_abi,
        landlock_error,
        seccomp: seccomp_available(),
        user_notification: super::notify::available(),
    }
}

fn kernel_release() -> Option<String> {
    // SAFETY: `utsname` is a plain C struct: all-zero bytes are valid.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct it is given.
    if unsafe { libc::uname(&mut name) } != 0 {
        return None;
    }
    // SAFETY: the kernel NUL-terminates the release.
    let release = unsafe { std::ffi::CStr::from_ptr(name.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}

/// Runs `:` in a namespaces sandbox of the temp dir: the only proof that every step works here
/// (AppArmor, seccomp profiles of container runtimes and sysctls can each refuse one).
fn probe_namespaces() -> Result<(), String> {
    let mut sandbox = Sandbox::new(std::env::temp_dir());
    sandbox.mode = Mode::Namespaces;
    let request = crate::exec::ExecRequest {
        shell: Some("/bin/sh".into()),
        command: ":".into(),
        cwd: "/".into(),
        env: None,
        cwd_map: None,
        sandbox: Some(sandbox.into()),
        events: None,
    };
    let hint = userns_hint();
    let mut execution = crate::exec::spawn(&request).map_err(|e| e.to_string())?;
    let outcome = execution.pump(&mut |_| true);
    match outcome.exit_code {
        Some(0) => Ok(()),
        code => Err(format!("a sandboxed `:` exited with {code:?}{hint}")),
    }
}
