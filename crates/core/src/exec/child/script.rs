//! Namespaces mode's plain data: what the template's builder and each command's init carry out
//! (built in Node by `NsPlan::new`, carried to the helper in its plan), and its encoding.

use std::ffi::CString;
use std::os::fd::RawFd;

use super::codec::{DecodeError, Decoder, Encoder};

/// One step of building a root: the template's on paths under `/oldroot` (the host) and
/// `/newroot`, a command's on its final paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::exec) enum Action {
    /// `mkdir` (an existing directory is fine).
    Mkdir(CString),
    /// An empty file or directory with no permissions, a source of masks.
    Empty {
        path: CString,
        dir: bool,
    },
    /// Bind `src` (recursively) at `dst`, created as a directory or an empty file first.
    Bind {
        src: CString,
        dst: CString,
        dir: bool,
        read_only: bool,
    },
    /// Bind the host file `src` (a path under `/oldroot` with no symlink) at `dst` if it is still
    /// the inode (`dev`, `ino`) resolved when the sandbox was made, found again without following
    /// symlinks (else ESTALE); `dst` is opened so too when `dst_checked` (it lies in a bind a
    /// command may write), else created as a directory or an empty file first.
    Verified {
        src: CString,
        dev: u64,
        ino: u64,
        dst: CString,
        dir: bool,
        read_only: bool,
        dst_checked: bool,
    },
    Symlink {
        target: CString,
        dst: CString,
    },
    Tmpfs {
        dst: CString,
        data: CString,
        flags: libc::c_ulong,
    },
    /// A proc of the PID namespace of the process mounting it.
    Proc(CString),
    /// Make one of our own tmpfs mounts read-only (not recursive).
    ReadOnly(CString),
    /// Move the mount at `src` (with everything under it) to `dst`, created as a directory or an
    /// empty file first.
    Move {
        src: CString,
        dst: CString,
        dir: bool,
    },
}

/// What the template's builder carries out, in new user, mount, PID and (without network)
/// network namespaces (`flags`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::exec) struct TemplateScript {
    /// The template's namespaces (`clone` flags).
    pub(in crate::exec) flags: libc::c_int,
    pub(in crate::exec) deny_setgroups: bool,
    pub(in crate::exec) uid_map: CString,
    pub(in crate::exec) gid_map: CString,
    /// The template's root, built once.
    pub(in crate::exec) actions: Vec<Action>,
    pub(in crate::exec) network: bool,
    /// Listen for the network proxy inside the template's network namespace and send the
    /// listening sockets to Node (`network_allow`).
    pub(in crate::exec) proxy_listen: bool,
}

/// What each command's init carries out: its own namespaces inside the template's, and its part
/// of the root on the template's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::exec) struct CommandScript {
    /// Each command's own namespaces, inside the template's user namespace.
    pub(in crate::exec) clone_flags: libc::c_int,
    /// Each command's additions, on the template's finished root.
    pub(in crate::exec) actions: Vec<Action>,
    /// How many actions the template has: the command's are numbered after them in errors.
    pub(in crate::exec) first_action: u32,
    /// The new PID namespace's `pid_max` (Linux 6.14 namespaces it): a bound for every caller.
    pub(in crate::exec) pid_max: CString,
    /// RLIMIT_NPROC inside (the exact limit), when the kernel counts it per user namespace and
    /// the caller is not root (the kernel exempts root).
    pub(in crate::exec) nproc: Option<u64>,
    /// The helper's descriptors of the template's user, mount and network namespaces (-1: none;
    /// set when Node hands them over).
    pub(in crate::exec) template_fds: [RawFd; 3],
}

const MKDIR: u8 = 0;
const EMPTY: u8 = 1;
const BIND: u8 = 2;
const VERIFIED: u8 = 3;
const SYMLINK: u8 = 4;
const TMPFS: u8 = 5;
const PROC: u8 = 6;
const READ_ONLY: u8 = 7;
const MOVE: u8 = 8;

impl Action {
    pub(in crate::exec) fn encode(&self, e: &mut Encoder) {
        match self {
            Action::Mkdir(path) => {
                e.u8(MKDIR);
                e.cstring(path);
            }
            Action::Empty { path, dir } => {
                e.u8(EMPTY);
                e.cstring(path);
                e.bool(*dir);
            }
            Action::Bind {
                src,
                dst,
                dir,
                read_only,
            } => {
                e.u8(BIND);
                e.cstring(src);
                e.cstring(dst);
                e.bool(*dir);
                e.bool(*read_only);
            }
            Action::Verified {
                src,
                dev,
                ino,
                dst,
                dir,
                read_only,
                dst_checked,
            } => {
                e.u8(VERIFIED);
                e.cstring(src);
                e.u64(*dev);
                e.u64(*ino);
                e.cstring(dst);
                e.bool(*dir);
                e.bool(*read_only);
                e.bool(*dst_checked);
            }
            Action::Symlink { target, dst } => {
                e.u8(SYMLINK);
                e.cstring(target);
                e.cstring(dst);
            }
            Action::Tmpfs { dst, data, flags } => {
                e.u8(TMPFS);
                e.cstring(dst);
                e.cstring(data);
                // `c_ulong` is 32 bits wide on 32-bit targets.
                #[allow(clippy::unnecessary_cast)]
                e.u64(*flags as u64);
            }
            Action::Proc(dst) => {
                e.u8(PROC);
                e.cstring(dst);
            }
            Action::ReadOnly(dst) => {
                e.u8(READ_ONLY);
                e.cstring(dst);
            }
            Action::Move { src, dst, dir } => {
                e.u8(MOVE);
                e.cstring(src);
                e.cstring(dst);
                e.bool(*dir);
            }
        }
    }

    pub(in crate::exec) fn decode(d: &mut Decoder<'_>) -> Result<Action, DecodeError> {
        Ok(match d.u8()? {
            MKDIR => Action::Mkdir(d.cstring()?),
            EMPTY => Action::Empty {
                path: d.cstring()?,
                dir: d.bool()?,
            },
            BIND => Action::Bind {
                src: d.cstring()?,
                dst: d.cstring()?,
                dir: d.bool()?,
                read_only: d.bool()?,
            },
            VERIFIED => Action::Verified {
                src: d.cstring()?,
                dev: d.u64()?,
                ino: d.u64()?,
                dst: d.cstring()?,
                dir: d.bool()?,
                read_only: d.bool()?,
                dst_checked: d.bool()?,
            },
            SYMLINK => Action::Symlink {
                target: d.cstring()?,
                dst: d.cstring()?,
            },
            TMPFS => Action::Tmpfs {
                dst: d.cstring()?,
                data: d.cstring()?,
                flags: d.u64()? as libc::c_ulong,
            },
            PROC => Action::Proc(d.cstring()?),
            READ_ONLY => Action::ReadOnly(d.cstring()?),
            MOVE => Action::Move {
                src: d.cstring()?,
                dst: d.cstring()?,
                dir: d.bool()?,
            },
            _ => return Err(DecodeError("an unknown mount action")),
        })
    }
}

/// The smallest encoded action: a tag and an empty string's length.
const MIN_ACTION_BYTES: usize = 5;

fn encode_actions(actions: &[Action], e: &mut Encoder) {
    e.len(actions.len());
    for action in actions {
        action.encode(e);
    }
}

fn decode_actions(d: &mut Decoder<'_>) -> Result<Vec<Action>, DecodeError> {
    let n = d.count(MIN_ACTION_BYTES)?;
    (0..n).map(|_| Action::decode(d)).collect()
}

impl TemplateScript {
    pub(in crate::exec) fn encode(&self, e: &mut Encoder) {
        e.i32(self.flags);
        e.bool(self.deny_setgroups);
        e.cstring(&self.uid_map);
        e.cstring(&self.gid_map);
        encode_actions(&self.actions, e);
        e.bool(self.network);
        e.bool(self.proxy_listen);
    }

    pub(in crate::exec) fn decode(d: &mut Decoder<'_>) -> Result<TemplateScript, DecodeError> {
        Ok(TemplateScript {
            flags: d.i32()?,
            deny_setgroups: d.bool()?,
            uid_map: d.cstring()?,
            gid_map: d.cstring()?,
            actions: decode_actions(d)?,
            network: d.bool()?,
            proxy_listen: d.bool()?,
        })
    }
}

impl CommandScript {
    pub(in crate::exec) fn encode(&self, e: &mut Encoder) {
        e.i32(self.clone_flags);
        encode_actions(&self.actions, e);
        e.u32(self.first_action);
        e.cstring(&self.pid_max);
        match self.nproc {
            Some(n) => {
                e.bool(true);
                e.u64(n);
            }
            None => e.bool(false),
        }
        for fd in self.template_fds {
            e.i32(fd);
        }
    }

    pub(in crate::exec) fn decode(d: &mut Decoder<'_>) -> Result<CommandScript, DecodeError> {
        Ok(CommandScript {
            clone_flags: d.i32()?,
            actions: decode_actions(d)?,
            first_action: d.u32()?,
            pid_max: d.cstring()?,
            nproc: if d.bool()? { Some(d.u64()?) } else { None },
            template_fds: [d.i32()?, d.i32()?, d.i32()?],
        })
    }
}

/// One action of each kind, for the encoding's tests.
#[cfg(test)]
pub(in crate::exec) fn action_samples() -> Vec<Action> {
    let c = |s: &str| CString::new(s).unwrap();
    vec![
        Action::Mkdir(c("/newroot/a")),
        Action::Empty {
            path: c("/tmp/.e"),
            dir: true,
        },
        Action::Bind {
            src: c("/oldroot/usr"),
            dst: c("/newroot/usr"),
            dir: true,
            read_only: true,
        },
        Action::Verified {
            src: c("/oldroot/w"),
            dev: u64::MAX,
            ino: 12,
            dst: c("/newroot/workspace"),
            dir: false,
            read_only: false,
            dst_checked: true,
        },
        Action::Symlink {
            target: c("/proc/self/fd"),
            dst: c("/newroot/dev/fd"),
        },
        Action::Tmpfs {
            dst: c("/tmp"),
            data: c("mode=1777,size=1"),
            flags: libc::MS_NOSUID | libc::MS_NODEV,
        },
        Action::Proc(c("/proc")),
        Action::ReadOnly(c("/newroot")),
        Action::Move {
            src: c(""),
            dst: c("/tmp"),
            dir: false,
        },
    ]
}
