//! The mount steps of namespaces mode's scripts (`Action`), carried out in the template's builder
//! and each command's init: binds (verified by inode), tmpfs, proc, read-only remounts. Raw
//! system calls on the decoded script: no allocation, no locks, nothing that may panic.

use std::ffi::CString;
use std::os::fd::RawFd;

use crate::exec::child::Action;
use crate::sys::{errno, set_errno};

/// `mount_setattr`'s `struct mount_attr` and flags (Linux 5.12).
#[repr(C)]
pub(super) struct MountAttr {
    pub(super) attr_set: u64,
    pub(super) attr_clr: u64,
    pub(super) propagation: u64,
    pub(super) userns_fd: u64,
}
pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(super) const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub(super) const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;
const AT_RECURSIVE: libc::c_uint = 0x8000;
pub(super) const AT_EMPTY_PATH: libc::c_uint = 0x1000;
/// `open_tree`'s and `move_mount`'s flags (Linux 5.2).
pub(super) const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
/// The mount flags `statvfs` reports as `ST_*` with the same values as `MS_*`, which a remount of a
/// bind must repeat (the kernel refuses to clear a locked one).
const KEPT_MOUNT_FLAGS: libc::c_ulong = libc::MS_NOSUID
    | libc::MS_NODEV
    | libc::MS_NOEXEC
    | libc::MS_SYNCHRONOUS
    | libc::MS_MANDLOCK
    | libc::MS_NOATIME
    | libc::MS_NODIRATIME
    | libc::MS_RELATIME;

/// Carries out one action of the script on this process's mount namespace; false with errno set
/// when it fails.
///
/// # Safety
///
/// Only in the template's builder or a command's init (`builder`'s and `init`'s contracts): a
/// single-threaded forked child whose mount namespace is its own, never Node's or the host's.
/// The actions were built before the fork.
pub(super) unsafe fn perform(action: &Action) -> bool {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: every call below takes the action's NUL-terminated strings (built before the fork),
    // static strings or null pointers where it takes none, and descriptors it opens and closes
    // itself; the mounts it changes are the caller's own namespace's (our contract).
    unsafe {
        match action {
            Action::Mkdir(path) => {
                libc::mkdir(path.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST
            }
            Action::Bind {
                src,
                dst,
                dir,
                read_only,
            } => {
                if !*dir {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
                if libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    null.cast(),
                ) != 0
                {
                    return false;
                }
                !*read_only || make_read_only(dst)
            }
            Action::Verified {
                src,
                dev,
                ino,
                dst,
                dir,
                read_only,
                dst_checked,
            } => bind_verified(src, (*dev, *ino), dst, *dir, *read_only, *dst_checked),
            Action::Symlink { target, dst } => libc::symlink(target.as_ptr(), dst.as_ptr()) == 0,
            Action::Tmpfs { dst, data, flags } => {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    dst.as_ptr(),
                    c"tmpfs".as_ptr(),
                    *flags,
                    data.as_ptr().cast(),
                ) == 0
            }
            Action::Empty { path, dir } => {
                if *dir {
                    libc::mkdir(path.as_ptr(), 0o000) == 0
                } else {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o000,
                    );
                    fd >= 0 && libc::close(fd) == 0
                }
            }
            Action::Proc(dst) => {
                libc::mount(
                    c"proc".as_ptr(),
                    dst.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    null.cast(),
                ) == 0
            }
            Action::ReadOnly(dst) => remount_read_only(dst),
            Action::Move { src, dst, dir } => {
                let made = if *dir {
                    libc::mkdir(dst.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST
                } else {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    fd >= 0 && libc::close(fd) == 0
                };
                made && libc::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_MOVE, null.cast())
                    == 0
            }
        }
    }
}

/// `Action::Verified`: the bind of a configured path, only of the inode `id` (device, inode) found
/// at `src` without following symlinks, through a detached copy of its mount tree (`open_tree`,
/// Linux 5.2) made read-only before it is attached, so no path is looked up twice. Before 5.2,
/// `mount` binds the descriptors through `/proc/self/fd`.
///
/// # Safety
///
/// As `perform`.
unsafe fn bind_verified(
    src: &CString,
    id: (u64, u64),
    dst: &CString,
    dir: bool,
    read_only: bool,
    dst_checked: bool,
) -> bool {
    let source = open_no_symlinks(src);
    if source < 0 {
        return false;
    }
    // SAFETY: `stat` is a plain C struct: all-zero bytes are valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `source` is ours and `st` valid; closed here when it is not the file asked for.
    if unsafe { libc::fstat(source, &mut st) } != 0 || (st.st_dev, st.st_ino) != id {
        // SAFETY: ours, not used again.
        unsafe { libc::close(source) };
        set_errno(libc::ESTALE);
        return false;
    }
    let target = if dst_checked {
        open_no_symlinks(dst)
    } else {
        // SAFETY: `dst` is NUL-terminated; the descriptors opened here are ours (the first
        // closed at once, the second below).
        unsafe {
            if !dir {
                let fd = libc::open(
                    dst.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            libc::open(dst.as_ptr(), libc::O_PATH | libc::O_CLOEXEC)
        }
    };
    // SAFETY: our open descriptors, in the caller's own mount namespace (our contract).
    let bound = target >= 0 && unsafe { attach(source, target, dst, read_only) };
    let failed = errno();
    // SAFETY: ours, not used again.
    unsafe {
        libc::close(source);
        if target >= 0 {
            libc::close(target);
        }
    }
    set_errno(failed);
    bound
}

/// Binds what `source` is open on at what `target` is open on (`dst` names it), read-only if asked.
///
/// # Safety
///
/// As `perform`; `source` and `target` are open descriptors of this process.
unsafe fn attach(source: RawFd, target: RawFd, dst: &CString, read_only: bool) -> bool {
    // SAFETY: `source` is open (our contract); the empty path is static.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            source,
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_EMPTY_PATH | AT_RECURSIVE,
        )
    } as libc::c_int;
    if tree < 0 {
        // SAFETY: our contract, passed on.
        return errno() == libc::ENOSYS
            && unsafe { attach_by_fd_paths(source, target, dst, read_only) };
    }
    let mut set = true;
    if read_only {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: `tree` is our detached mount; `attr` is valid for the size passed.
        set = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree,
                c"".as_ptr(),
                AT_EMPTY_PATH | AT_RECURSIVE,
                &attr as *const MountAttr,
                size_of::<MountAttr>(),
            )
        } == 0;
        // Before 5.12: the bind itself, once attached.
        if !set && errno() != libc::ENOSYS {
            let failed = errno();
            // SAFETY: ours, not used again.
            unsafe { libc::close(tree) };
            set_errno(failed);
            return false;
        }
    }
    // SAFETY: `tree` is ours and `target` open (our contract); the mount lands in the caller's own
    // namespace.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    } == 0;
    let failed = errno();
    // SAFETY: ours, not used again.
    unsafe { libc::close(tree) };
    set_errno(failed);
    // SAFETY: our contract, passed on.
    moved && (set || unsafe { remount_attached(dst) })
}

/// `attach` before Linux 5.2: `mount` of the host's `/proc/self/fd` names of the two descriptors
/// (both opened in this mount namespace, as a bind requires).
///
/// # Safety
///
/// As `attach`.
unsafe fn attach_by_fd_paths(source: RawFd, target: RawFd, dst: &CString, read_only: bool) -> bool {
    let (mut from, mut to) = ([0u8; FD_PATH_BYTES], [0u8; FD_PATH_BYTES]);
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: `fd_path` fills NUL-terminated paths in `from` and `to`, alive across the call; the
    // mount lands in the caller's own namespace (our contract).
    let bound = unsafe {
        libc::mount(
            fd_path(source, &mut from),
            fd_path(target, &mut to),
            null,
            libc::MS_BIND | libc::MS_REC,
            null.cast(),
        )
    } == 0;
    // SAFETY: our contract, passed on.
    bound && (!read_only || unsafe { remount_attached(dst) })
}

/// Makes the bind just attached at `dst` read-only: the mount found there again without following
/// symlinks, remounted through its `/proc/self/fd` name.
///
/// # Safety
///
/// As `perform`.
unsafe fn remount_attached(dst: &CString) -> bool {
    let fd = open_no_symlinks(dst);
    if fd < 0 {
        return false;
    }
    let mut name = [0u8; FD_PATH_BYTES];
    // SAFETY: `fd_path` returns `name`'s start, NUL-terminated, alive for this function.
    let path = unsafe { std::ffi::CStr::from_ptr(fd_path(fd, &mut name)) };
    // SAFETY: our contract, passed on.
    let done = unsafe { make_read_only(path) };
    let failed = errno();
    // SAFETY: ours, not used again.
    unsafe { libc::close(fd) };
    set_errno(failed);
    done
}

/// `/oldroot/proc/self/fd/` and the digits of a descriptor, and its NUL.
const FD_PATH_BYTES: usize = 48;

/// `/oldroot/proc/self/fd/<fd>` in `buf` (the host's proc, which shows this process too): a path
/// naming the file `fd` is open on, NUL-terminated, at `buf`'s start. No allocation.
fn fd_path(fd: RawFd, buf: &mut [u8; FD_PATH_BYTES]) -> *const libc::c_char {
    const PREFIX: &[u8] = b"/oldroot/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr().cast()
}

/// Read-only, nosuid and nodev for the bind at `dst` and every mount under it (`mount_setattr`,
/// Linux 5.12); on older kernels only the bind itself.
///
/// # Safety
///
/// As `perform`.
unsafe fn make_read_only(dst: &std::ffi::CStr) -> bool {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `dst` is NUL-terminated and `attr` valid for the size passed; the mounts are the
    // caller's own namespace's (our contract).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            dst.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    // SAFETY: our contract, passed on.
    r == 0 || (errno() == libc::ENOSYS && unsafe { remount_read_only(dst) })
}

/// Remounts the bind at `dst` read-only, keeping the flags it has (a locked one cannot be cleared).
///
/// # Safety
///
/// As `perform`.
unsafe fn remount_read_only(dst: &std::ffi::CStr) -> bool {
    // SAFETY: `statvfs` is a plain C struct: all-zero bytes are valid.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dst` is NUL-terminated, `fs` valid.
    let kept = if unsafe { libc::statvfs(dst.as_ptr(), &mut fs) } == 0 {
        fs.f_flag as libc::c_ulong & KEPT_MOUNT_FLAGS
    } else {
        0
    };
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: `dst` is NUL-terminated, null pointers where `mount` takes none; the mount is the
    // caller's own namespace's (our contract).
    unsafe {
        libc::mount(
            null,
            dst.as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | kept,
            null.cast(),
        ) == 0
    }
}

/// Opens `path` (absolute) with `O_PATH`, following no symlink in any component (`..` refused);
/// -1 with errno set on failure. Async-signal-safe (raw system calls on a stack buffer); the
/// caller owns the descriptor returned, and closes it.
fn open_no_symlinks(path: &std::ffi::CStr) -> RawFd {
    /// The kernel's longest file name (`NAME_MAX`), plus its NUL.
    const NAME_BYTES: usize = 256;
    // SAFETY: a static NUL-terminated path.
    let mut dir = unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return -1;
    }
    let mut name = [0u8; NAME_BYTES];
    for part in path.to_bytes().split(|b| *b == b'/') {
        if part.is_empty() || part == b"." {
            continue;
        }
        if part == b".." || part.len() >= NAME_BYTES {
            // SAFETY: `dir` is ours, not used again.
            unsafe { libc::close(dir) };
            set_errno(if part == b".." {
                libc::EINVAL
            } else {
                libc::ENAMETOOLONG
            });
            return -1;
        }
        name[..part.len()].copy_from_slice(part);
        name[part.len()] = 0;
        // SAFETY: `dir` is our open directory; `name` holds the NUL-terminated component.
        let next = unsafe {
            libc::openat(
                dir,
                name.as_ptr().cast(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        let failed = errno();
        // SAFETY: `dir` is ours, replaced by `next` below.
        unsafe { libc::close(dir) };
        if next < 0 {
            set_errno(failed);
            return -1;
        }
        dir = next;
    }
    dir
}
