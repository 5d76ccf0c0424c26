//! What Node hands a sandbox helper (`launch` starts it, `helper` is its side): the plan as plain
//! data (`plan`, `script`), its bounded encoding (`codec`), and where each descriptor is. Nothing
//! here runs a process; both sides depend on it, and it on nothing else of `exec`.
//!
//! The descriptors a helper starts with: `PLAN_FD` (the plan), /dev/null on stdout and stderr,
//! then those handed, from `FIRST_FD` on, in the order each role's plan names them.

use std::ffi::CStr;
use std::os::fd::RawFd;

pub(in crate::exec) mod codec;
mod plan;
mod script;
#[cfg(test)]
mod tests;

pub(in crate::exec) use plan::{decode_template, encode_template, ChildPlan, ChildSandbox};
pub(in crate::exec) use script::{Action, CommandScript, TemplateScript};

/// The helper's `argv[0]`: what `main_if_helper` recognises (and what `ps` shows).
pub(in crate::exec) const ARG0: &CStr = c"pi-sandbox-helper";
/// Where the helper finds its plan.
pub(in crate::exec) const PLAN_FD: RawFd = libc::STDIN_FILENO;
/// The first handed descriptor.
pub(in crate::exec) const FIRST_FD: RawFd = 3;
/// The supervisor's three pipes with Node, the first handed descriptors in this order.
pub(in crate::exec) const STATUS_FD: RawFd = FIRST_FD;
pub(in crate::exec) const CONTROL_FD: RawFd = FIRST_FD + 1;
pub(in crate::exec) const OUTPUT_FD: RawFd = FIRST_FD + 2;
/// The template's and the view's report channel.
pub(in crate::exec) const CHANNEL_FD: RawFd = FIRST_FD;
/// The root directory a view is made of.
pub(in crate::exec) const VIEW_ROOT_FD: RawFd = FIRST_FD + 1;
/// The largest plan a helper reads: far above any command (Linux caps `execve`'s arguments and
/// environment at a quarter of the stack limit, 2 MiB by default) and its sandbox's mounts.
pub(in crate::exec) const MAX_PLAN_BYTES: u64 = 16 << 20;

/// What a helper process is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::exec) enum Role {
    /// One sandboxed command's supervisor (and, in namespaces mode, its init).
    Supervisor,
    /// The builder of a namespaces sandbox's template.
    Template,
    /// The maker of a workspace root's view (`exec::view`).
    View,
}

impl Role {
    pub(in crate::exec) fn arg(self) -> &'static CStr {
        match self {
            Role::Supervisor => c"supervisor",
            Role::Template => c"template",
            Role::View => c"view",
        }
    }
}

/// The view role's report: a code, then the errno of the step that failed.
pub(in crate::exec) const VIEW_OK: i32 = 0;
/// No user and mount namespaces of its own: none for any root.
pub(in crate::exec) const VIEW_UNSHARE_FAILED: i32 = 1;
/// The root could not be entered, or its mount copied (a mount beneath it, or no `open_tree`).
pub(in crate::exec) const VIEW_CLONE_FAILED: i32 = 2;
/// The copy could not be made read-only and without symlinks (no `mount_setattr` or
/// `MOUNT_ATTR_NOSYMFOLLOW`: Linux 5.12, 5.10).
pub(in crate::exec) const VIEW_SETATTR_FAILED: i32 = 3;

/// The most descriptors a report carries: three namespaces and two listening sockets.
pub(in crate::exec) const REPORT_MAX_FDS: usize = 5;
