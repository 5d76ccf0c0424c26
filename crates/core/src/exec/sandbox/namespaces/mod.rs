//! Namespaces mode: the plan of the sandbox's filesystem, built here in Node (`script`: plain
//! data), and the template built from it (Node's side: the helper's report of the namespaces'
//! descriptors). The helper's processes carry it out (`exec::helper`): the template's builder,
//! which makes its fixed part once, and each command's init, which adds the command's own part.
//!
//! The **template** is a user namespace, a mount namespace holding the finished root (system
//! directories read-only, secrets masked, `/dev`, the workspace and the caller's binds, the whole
//! root read-only) and, without network, a network namespace with its loopback up. A short-lived
//! sandbox helper (a freshly executed image, nothing of Node's) builds it on the first exec of a
//! `Prepared` sandbox and sends Node descriptors of the three namespaces (they live as long as a
//! descriptor or a process holds them: nothing is left when Node exits, however it exits).
//!
//! **Each command**: the helper's supervisor joins the template's namespaces (`setns`) and clones the init
//! into a new mount namespace (a private copy of the template's: nothing it mounts reaches the
//! template or another command), a new PID namespace (the tree dies totally with the init), and
//! new IPC and UTS namespaces (SysV IPC objects outlive their processes). The init mounts a fresh
//! `/proc`, a private tmpfs `/tmp` and `/dev/shm` (the only writable places besides the
//! workspace and the caller's read-write binds), and starts the shell.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use crate::exec::child::{CommandScript, TemplateScript};

mod script;

#[cfg(test)]
pub(super) use script::tmpfs_options;

/// Namespaces mode's plan, prepared in Node: what the template's builder and each command's init
/// carry out (plain data the helper is handed), how to name a step of it that failed, and the
/// template once built.
pub(in crate::exec) struct NsPlan {
    /// What each action does (the template's, then the command's), for an error naming the step.
    pub(super) descriptions: Vec<String>,
    pub(in crate::exec) template_script: TemplateScript,
    /// Each command's part (its `template_fds` are -1: the helper's own numbers are set when
    /// they are handed over).
    pub(in crate::exec) command_script: CommandScript,
    /// The template, once built.
    pub(super) template: Option<Template>,
}

/// Descriptors of the template's namespaces: holding them keeps the namespaces alive.
pub(super) struct Template {
    user: OwnedFd,
    mnt: OwnedFd,
    net: Option<OwnedFd>,
}

impl NsPlan {
    /// The descriptors the supervisor must keep open to join the template (-1: none).
    pub(in crate::exec) fn kept_fds(&self) -> [RawFd; 3] {
        match &self.template {
            Some(t) => [
                t.user.as_raw_fd(),
                t.mnt.as_raw_fd(),
                t.net.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            ],
            None => [-1; 3],
        }
    }
}

impl NsPlan {
    /// Builds the template: a sandbox helper carries out `template_script` in new user, mount,
    /// PID and (without network) network namespaces and sends descriptors of them, which this
    /// plan keeps. `Err(code)`: the encoded failed step, or an I/O error of ours.
    /// Returns the proxy's listening sockets inside the template's network namespace, when the
    /// plan asked for them (`proxy_listen`): IPv4 first, then IPv6 if the kernel has it.
    pub(super) fn build_template(&mut self) -> Result<Vec<OwnedFd>, TemplateError> {
        use crate::exec::{child, launch};
        let (node, child_end) = crate::sys::seqpacket_pair()?;
        let plan = child::encode_template(&self.template_script);
        let pid = launch::launch(child::Role::Template, &plan, &[child_end.as_fd()])?;
        drop(child_end);
        let mut code = [0u8; size_of::<i32>()];
        let report = launch::receive_report(&node, &mut code, "the sandbox's template builder");
        launch::wait(pid);
        let mut fds = report.map_err(TemplateError::Io)?;
        let code = i32::from_ne_bytes(code);
        if code != 0 {
            return Err(TemplateError::Step(code));
        }
        let namespaces = if self.template_script.network { 2 } else { 3 };
        if fds.len() < namespaces
            || (self.template_script.proxy_listen == (fds.len() == namespaces))
        {
            return Err(TemplateError::Io(io::Error::other(
                "the sandbox's template builder sent the wrong descriptors",
            )));
        }
        let listeners = fds.split_off(namespaces);
        let mut fds = fds.into_iter();
        let (Some(user), Some(mnt)) = (fds.next(), fds.next()) else {
            unreachable!("counted above")
        };
        self.template = Some(Template {
            user,
            mnt,
            net: fds.next(),
        });
        Ok(listeners)
    }
}

/// Why the template could not be built.
pub(super) enum TemplateError {
    /// A setup step failed: `step_error`'s encoding.
    Step(i32),
    Io(io::Error),
}

impl From<io::Error> for TemplateError {
    fn from(e: io::Error) -> Self {
        TemplateError::Io(e)
    }
}
