//! The notified system calls, decoded once from their number and arguments: what the metadata,
//! lock and watch handler performs (`Call`), and what the guard checks (`GuardCall`).

use super::super::seccomp::{SYS_REMOVEXATTRAT, SYS_SETXATTRAT};

/// `fchmodat2` (Linux 6.6), one number on every architecture.
pub(super) const SYS_FCHMODAT2: libc::c_long = 452;

/// Where a call's object is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Object {
    /// A path (a pointer in the caller's memory; 0 is NULL) relative to `dirfd`.
    Path {
        dirfd: i32,
        path: u64,
        follow: bool,
        /// `AT_EMPTY_PATH`: an empty (or NULL) path names `dirfd` itself.
        empty: bool,
    },
    /// A descriptor of the caller.
    Fd(i32),
}

/// How a call's timestamps are given in the caller's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Times {
    /// `struct utimbuf` (two `time_t`, seconds): `utime`, an x86_64-only call.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Utimbuf,
    /// `struct timeval[2]`: `utimes` and `futimesat`, x86_64-only calls.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Timeval,
    /// `struct timespec[2]` (`utimensat`).
    Timespec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Chmod(u32),
    Chown(u32, u32),
    /// The times pointer (0: now).
    Utimes(Times, u64),
    SetXattr {
        name: u64,
        value: u64,
        size: u64,
        flags: i32,
    },
    /// `setxattrat`: the value and flags are in a `struct xattr_args` of `size` bytes.
    SetXattrArgs {
        name: u64,
        args: u64,
        size: u64,
    },
    RemoveXattr(u64),
    Flock(i32),
    /// `fcntl` lock command and the `struct flock` pointer.
    Lock(i32, u64),
    /// `inotify_add_watch` on the caller's inotify descriptor.
    Watch {
        inotify: i32,
        mask: u32,
    },
}

/// A call the handler performs itself: its object and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) object: Object,
    pub(super) op: Op,
}

/// Where a call names a path: `dirfd` (or the cwd) and the pointer to the path.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    pub(super) dirfd: i32,
    pub(super) path: u64,
    /// `AT_EMPTY_PATH`: an empty path names `dirfd` itself.
    pub(super) empty: bool,
}

impl At {
    /// The cwd, for a path read already (`bind`'s, from its address).
    pub(super) const CWD: At = At {
        dirfd: libc::AT_FDCWD,
        path: 0,
        empty: false,
    };
}

/// A call the guard checks and performs.
#[derive(Debug, Clone, Copy)]
pub(super) enum GuardCall {
    Open {
        at: At,
        flags: i32,
        mode: u32,
    },
    Rename {
        from: At,
        to: At,
        flags: u32,
    },
    Link {
        from: At,
        to: At,
        follow: bool,
    },
    Symlink {
        text: u64,
        at: At,
    },
    Unlink {
        at: At,
        dir: bool,
    },
    /// `mkdir` (`dev` None) or `mknod`.
    Make {
        at: At,
        mode: u32,
        dev: Option<u64>,
    },
    Truncate {
        at: At,
        length: i64,
    },
    /// `bind(fd, addr, len)`: a Unix socket's path is a name like any other.
    Bind {
        fd: i32,
        addr: u64,
        len: u32,
    },
}

impl GuardCall {
    pub(super) fn changes_names(&self) -> bool {
        match self {
            GuardCall::Open { flags, .. } => flags & libc::O_CREAT != 0,
            GuardCall::Truncate { .. } => false,
            _ => true,
        }
    }
}

/// A notified call, decoded: the handler's own (metadata, locks, watches) or the guard's.
#[derive(Debug, Clone, Copy)]
pub(super) enum Notified {
    Handler(Call),
    Guard(GuardCall),
}

/// The call of system call `nr` with `args`, or the errno the kernel gives bad arguments.
pub(super) fn decode(nr: libc::c_long, a: [u64; 6]) -> Result<Notified, i32> {
    let fd = |i: usize| a[i] as i32;
    let path = |dirfd: i32, path: u64, follow: bool| Object::Path {
        dirfd,
        path,
        follow,
        empty: false,
    };
    let at_flags = |flags: u64| -> Result<(bool, bool), i32> {
        let flags = flags as i32;
        if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return Err(libc::EINVAL);
        }
        Ok((
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            flags & libc::AT_EMPTY_PATH != 0,
        ))
    };
    let at = |dirfd: i32, ptr: u64, flags: u64| -> Result<Object, i32> {
        let (follow, empty) = at_flags(flags)?;
        Ok(Object::Path {
            dirfd,
            path: ptr,
            follow,
            empty,
        })
    };
    let cwd = libc::AT_FDCWD;
    let call = |object, op| Ok(Notified::Handler(Call { object, op }));
    let guarded = |call| Ok(Notified::Guard(call));
    let name_at = |dirfd: u64, path: u64| At {
        dirfd: dirfd as i32,
        path,
        empty: false,
    };
    let name_here = |path: u64| name_at(cwd as u64, path);
    #[cfg(target_arch = "x86_64")]
    match nr {
        libc::SYS_chmod => return call(path(cwd, a[0], true), Op::Chmod(a[1] as u32)),
        libc::SYS_chown => return call(path(cwd, a[0], true), Op::Chown(a[1] as u32, a[2] as u32)),
        libc::SYS_lchown => {
            return call(path(cwd, a[0], false), Op::Chown(a[1] as u32, a[2] as u32))
        }
        libc::SYS_utime => return call(path(cwd, a[0], true), Op::Utimes(Times::Utimbuf, a[1])),
        libc::SYS_utimes => return call(path(cwd, a[0], true), Op::Utimes(Times::Timeval, a[1])),
        libc::SYS_futimesat => {
            return call(path(fd(0), a[1], true), Op::Utimes(Times::Timeval, a[2]))
        }
        libc::SYS_open => {
            return guarded(GuardCall::Open {
                at: name_here(a[0]),
                flags: a[1] as i32,
                mode: a[2] as u32,
            })
        }
        libc::SYS_creat => {
            return guarded(GuardCall::Open {
                at: name_here(a[0]),
                flags: libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                mode: a[1] as u32,
            })
        }
        libc::SYS_rename => {
            return guarded(GuardCall::Rename {
                from: name_here(a[0]),
                to: name_here(a[1]),
                flags: 0,
            })
        }
        libc::SYS_renameat => {
            return guarded(GuardCall::Rename {
                from: name_at(a[0], a[1]),
                to: name_at(a[2], a[3]),
                flags: 0,
            })
        }
        libc::SYS_link => {
            return guarded(GuardCall::Link {
                from: name_here(a[0]),
                to: name_here(a[1]),
                follow: false,
            })
        }
        libc::SYS_symlink => {
            return guarded(GuardCall::Symlink {
                text: a[0],
                at: name_here(a[1]),
            })
        }
        libc::SYS_unlink => {
            return guarded(GuardCall::Unlink {
                at: name_here(a[0]),
                dir: false,
            })
        }
        libc::SYS_rmdir => {
            return guarded(GuardCall::Unlink {
                at: name_here(a[0]),
                dir: true,
            })
        }
        libc::SYS_mkdir => {
            return guarded(GuardCall::Make {
                at: name_here(a[0]),
                mode: a[1] as u32,
                dev: None,
            })
        }
        libc::SYS_mknod => {
            return guarded(GuardCall::Make {
                at: name_here(a[0]),
                mode: a[1] as u32,
                dev: Some(a[2]),
            })
        }
        _ => {}
    }
    match nr {
        libc::SYS_fchmod => call(Object::Fd(fd(0)), Op::Chmod(a[1] as u32)),
        // fchmodat has no flags argument: it follows.
        libc::SYS_fchmodat => call(path(fd(0), a[1], true), Op::Chmod(a[2] as u32)),
        SYS_FCHMODAT2 => call(at(fd(0), a[1], a[3])?, Op::Chmod(a[2] as u32)),
        libc::SYS_fchown => call(Object::Fd(fd(0)), Op::Chown(a[1] as u32, a[2] as u32)),
        libc::SYS_fchownat => call(at(fd(0), a[1], a[4])?, Op::Chown(a[2] as u32, a[3] as u32)),
        libc::SYS_utimensat => {
            let op = Op::Utimes(Times::Timespec, a[2]);
            if a[1] == 0 {
                // A NULL path names the descriptor itself, and takes no flags.
                if fd(0) == cwd {
                    return Err(libc::EFAULT);
                }
                if a[3] as i32 != 0 {
                    return Err(libc::EINVAL);
                }
                return call(Object::Fd(fd(0)), op);
            }
            call(at(fd(0), a[1], a[3])?, op)
        }
        libc::SYS_setxattr | libc::SYS_lsetxattr => call(
            path(cwd, a[0], nr == libc::SYS_setxattr),
            Op::SetXattr {
                name: a[1],
                value: a[2],
                size: a[3],
                flags: a[4] as i32,
            },
        ),
        libc::SYS_fsetxattr => call(
            Object::Fd(fd(0)),
            Op::SetXattr {
                name: a[1],
                value: a[2],
                size: a[3],
                flags: a[4] as i32,
            },
        ),
        libc::SYS_removexattr | libc::SYS_lremovexattr => call(
            path(cwd, a[0], nr == libc::SYS_removexattr),
            Op::RemoveXattr(a[1]),
        ),
        libc::SYS_fremovexattr => call(Object::Fd(fd(0)), Op::RemoveXattr(a[1])),
        SYS_SETXATTRAT => call(
            at(fd(0), a[1], a[2])?,
            Op::SetXattrArgs {
                name: a[3],
                args: a[4],
                size: a[5],
            },
        ),
        SYS_REMOVEXATTRAT => call(at(fd(0), a[1], a[2])?, Op::RemoveXattr(a[3])),
        libc::SYS_flock => call(Object::Fd(fd(0)), Op::Flock(a[1] as i32)),
        libc::SYS_inotify_add_watch => call(
            path(cwd, a[1], a[2] as u32 & libc::IN_DONT_FOLLOW == 0),
            Op::Watch {
                inotify: fd(0),
                mask: a[2] as u32,
            },
        ),
        libc::SYS_fcntl => call(Object::Fd(fd(0)), Op::Lock(a[1] as i32, a[2])),
        libc::SYS_openat => guarded(GuardCall::Open {
            at: name_at(a[0], a[1]),
            flags: a[2] as i32,
            mode: a[3] as u32,
        }),
        libc::SYS_renameat2 => guarded(GuardCall::Rename {
            from: name_at(a[0], a[1]),
            to: name_at(a[2], a[3]),
            flags: a[4] as u32,
        }),
        libc::SYS_linkat => {
            let flags = a[4] as i32;
            if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
                return Err(libc::EINVAL);
            }
            let mut from = name_at(a[0], a[1]);
            from.empty = flags & libc::AT_EMPTY_PATH != 0;
            guarded(GuardCall::Link {
                from,
                to: name_at(a[2], a[3]),
                follow: flags & libc::AT_SYMLINK_FOLLOW != 0,
            })
        }
        libc::SYS_symlinkat => guarded(GuardCall::Symlink {
            text: a[0],
            at: name_at(a[1], a[2]),
        }),
        libc::SYS_unlinkat => {
            let flags = a[2] as i32;
            if flags & !libc::AT_REMOVEDIR != 0 {
                return Err(libc::EINVAL);
            }
            guarded(GuardCall::Unlink {
                at: name_at(a[0], a[1]),
                dir: flags & libc::AT_REMOVEDIR != 0,
            })
        }
        libc::SYS_mkdirat => guarded(GuardCall::Make {
            at: name_at(a[0], a[1]),
            mode: a[2] as u32,
            dev: None,
        }),
        libc::SYS_mknodat => guarded(GuardCall::Make {
            at: name_at(a[0], a[1]),
            mode: a[2] as u32,
            dev: Some(a[3]),
        }),
        libc::SYS_truncate => guarded(GuardCall::Truncate {
            at: name_here(a[0]),
            length: a[1] as i64,
        }),
        libc::SYS_bind => guarded(GuardCall::Bind {
            fd: a[0] as i32,
            addr: a[1],
            len: a[2] as u32,
        }),
        _ => Err(libc::ENOSYS),
    }
}
