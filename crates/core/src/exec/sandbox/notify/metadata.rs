//! Mode, owner, time and xattr calls (Landlock mode, which governs none of them), performed by
//! the handler on the object it resolved when that object lies in a writable area.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::answer::result;
use super::caller::Target;
use super::decode::{Call, Object, Op, Times, SYS_FCHMODAT2};
use super::locks::lock;
use super::objects::proc_fd;
use super::{Policy, Reply};
use crate::sys::errno;

/// The longest xattr name, NUL included (`XATTR_NAME_MAX` + 1).
const XATTR_NAME_BYTES: usize = 256;
/// The largest xattr value the kernel takes (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65_536;
/// `struct xattr_args` of `setxattrat` (value pointer, size, flags): its first version's size.
const XATTR_ARGS_BYTES: usize = 16;

/// The status flags of `fd` (`F_GETFL`), `None` when unknown.
fn status_flags(fd: BorrowedFd<'_>) -> Option<i32> {
    // SAFETY: F_GETFL on our descriptor.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    (flags >= 0).then_some(flags)
}

/// Whether status `flags` are those of a file opened for writing: setting its times to now (what
/// every write does) needs no check then, since Landlock let the caller open it for writing
/// (`touch` does exactly this on each file). `O_PATH` descriptors are not.
fn for_writing(flags: i32) -> bool {
    flags & libc::O_PATH == 0 && matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
}

fn is_symlink(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed stat is a valid buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our buffer.
    let known = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0;
    known && st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// Refused metadata changes outside the writable areas: "operation not permitted", what the
/// kernel answers a caller that may not change a file's attributes.
const REFUSED_METADATA: i32 = libc::EPERM;

pub(super) fn perform(policy: &Policy, target: &Target<'_>, call: Call) -> Result<Reply, i32> {
    if let Op::Flock(_) | Op::Lock(..) = call.op {
        return lock(policy, target, call);
    }
    // `opened`: the descriptor is an open file (not `O_PATH`), so the descriptor calls take it.
    // `fast`: opened beneath an area (`open_beneath`), where the path and the cwd were all that
    // was read by pid.
    let (object, allowed, opened, fast) = match policy.open_beneath(target, call.object) {
        Some(object) => (object, true, false, true),
        None => {
            let object = target.resolve(call.object)?;
            let flags = match (call.object, call.op) {
                (Object::Fd(_), Op::Utimes(..)) => status_flags(object.as_fd()),
                // Not asked (nothing below needs it): taken as O_PATH, so the calls below go
                // through `fd, ""` with AT_EMPTY_PATH, which takes any descriptor.
                _ => Some(libc::O_PATH),
            };
            let writer = matches!(call.op, Op::Utimes(_, 0)) && flags.is_some_and(for_writing);
            let opened = flags.is_some_and(|f| f & libc::O_PATH == 0);
            (object, writer, opened, false)
        }
    };
    let fd = object.as_fd();
    // Everything read from the caller (by pid) is read: it must still be the caller, unless a
    // handle kept from an earlier call proved it (`fd_proven`, `cwd_proven`) after the last read
    // by pid: these calls read no arguments from its memory.
    let arguments = read_arguments(target, call.op)?;
    let no_arguments = matches!(call.op, Op::Chmod(_) | Op::Chown(..) | Op::Utimes(_, 0));
    let proven = no_arguments
        && match call.object {
            Object::Fd(_) => target.fd_proven(),
            Object::Path { .. } => fast && target.cwd_proven(),
        };
    if !(proven || target.valid()) {
        return Err(libc::ENOENT);
    }
    if !allowed && !policy.inside(fd) {
        return Err(REFUSED_METADATA);
    }

    let path = || proc_fd(fd);
    // A path opened following its last component is no symlink; anything else may be.
    let symlink = || {
        !matches!(
            call.object,
            Object::Path {
                follow: true,
                empty: false,
                ..
            }
        ) && is_symlink(fd)
    };
    // SAFETY: each call below is a system call on our descriptor, our NUL-terminated strings and
    // buffers read above.
    let r = unsafe {
        match (call.op, arguments) {
            (Op::Chmod(_), _) if symlink() => return Err(libc::EOPNOTSUPP),
            (Op::Chmod(mode), _) => {
                let r = libc::syscall(
                    SYS_FCHMODAT2,
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    mode,
                    libc::AT_EMPTY_PATH,
                );
                if r < 0 && errno() == libc::ENOSYS {
                    libc::chmod(path().as_ptr().cast(), mode) as libc::c_long
                } else {
                    r
                }
            }
            (Op::Chown(uid, gid), _) => {
                libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH)
                    as libc::c_long
            }
            (Op::Utimes(..), Arguments::Times(times)) => {
                let times_ptr = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
                if opened {
                    // `futimens`: no path lookup at all, where the descriptor allows it.
                    libc::futimens(fd.as_raw_fd(), times_ptr) as libc::c_long
                } else {
                    libc::utimensat(fd.as_raw_fd(), c"".as_ptr(), times_ptr, libc::AT_EMPTY_PATH)
                        as libc::c_long
                }
            }
            (
                Op::SetXattr { .. } | Op::SetXattrArgs { .. },
                Arguments::Xattr(name, value, flags),
            ) => {
                if symlink() {
                    return Err(libc::EPERM);
                }
                let (ptr, len) = (value.as_ptr(), value.len());
                match call.object {
                    Object::Fd(_) => libc::fsetxattr(
                        fd.as_raw_fd(),
                        name.as_ptr().cast(),
                        ptr.cast(),
                        len,
                        flags,
                    ) as libc::c_long,
                    _ => libc::setxattr(
                        path().as_ptr().cast(),
                        name.as_ptr().cast(),
                        ptr.cast(),
                        len,
                        flags,
                    ) as libc::c_long,
                }
            }
            (Op::RemoveXattr(_), Arguments::Name(name)) => {
                if symlink() {
                    return Err(libc::EPERM);
                }
                match call.object {
                    Object::Fd(_) => {
                        libc::fremovexattr(fd.as_raw_fd(), name.as_ptr().cast()) as libc::c_long
                    }
                    _ => libc::removexattr(path().as_ptr().cast(), name.as_ptr().cast())
                        as libc::c_long,
                }
            }
            _ => return Err(libc::EINVAL),
        }
    };
    Ok(result(r))
}

/// What a call needs from the caller's memory besides the path.
enum Arguments {
    None,
    /// `utimensat`'s times (`None`: now).
    Times(Option<[libc::timespec; 2]>),
    /// A name, NUL-terminated, a value, and the flags.
    Xattr(Vec<u8>, Vec<u8>, i32),
    Name(Vec<u8>),
}

fn xattr_name(target: &Target<'_>, ptr: u64) -> Result<Vec<u8>, i32> {
    let mut name = target.string(ptr, XATTR_NAME_BYTES, libc::ERANGE)?;
    if name.is_empty() {
        return Err(libc::ERANGE);
    }
    name.push(0);
    Ok(name)
}

fn read_arguments(target: &Target<'_>, op: Op) -> Result<Arguments, i32> {
    Ok(match op {
        Op::Utimes(kind, 0) => {
            let _ = kind;
            Arguments::Times(None)
        }
        Op::Utimes(kind, ptr) => Arguments::Times(Some(decode_times(
            kind,
            &target.read(ptr, times_bytes(kind))?,
        )?)),
        Op::SetXattr {
            name,
            value,
            size,
            flags,
        } => {
            let name = xattr_name(target, name)?;
            let value = xattr_value(target, value, size)?;
            Arguments::Xattr(name, value, flags)
        }
        Op::SetXattrArgs { name, args, size } => {
            if (size as usize) < XATTR_ARGS_BYTES {
                return Err(libc::EINVAL);
            }
            let name = xattr_name(target, name)?;
            let raw = target.read(args, XATTR_ARGS_BYTES)?;
            let value_ptr = u64::from_ne_bytes(raw[0..8].try_into().expect("8 bytes"));
            let value_size = u32::from_ne_bytes(raw[8..12].try_into().expect("4 bytes"));
            let flags = u32::from_ne_bytes(raw[12..16].try_into().expect("4 bytes"));
            let value = xattr_value(target, value_ptr, value_size as u64)?;
            Arguments::Xattr(name, value, flags as i32)
        }
        Op::RemoveXattr(name) => Arguments::Name(xattr_name(target, name)?),
        _ => Arguments::None,
    })
}

fn xattr_value(target: &Target<'_>, ptr: u64, size: u64) -> Result<Vec<u8>, i32> {
    if size as usize > XATTR_SIZE_MAX || size > usize::MAX as u64 {
        return Err(libc::E2BIG);
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    target.read(ptr, size as usize)
}

fn times_bytes(kind: Times) -> usize {
    match kind {
        Times::Utimbuf => 2 * size_of::<libc::time_t>(),
        Times::Timeval => 2 * size_of::<libc::timeval>(),
        Times::Timespec => 2 * size_of::<libc::timespec>(),
    }
}

/// Two timestamps as `utimensat` takes them, from the caller's bytes of `kind`.
pub(super) fn decode_times(kind: Times, raw: &[u8]) -> Result<[libc::timespec; 2], i32> {
    let word = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    /// Microseconds and nanoseconds per second.
    const MICROS: i64 = 1_000_000;
    const NANOS_PER_MICRO: i64 = 1_000;
    let ts = |sec: i64, nsec: i64| libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    };
    Ok(match kind {
        Times::Utimbuf => [ts(word(0), 0), ts(word(1), 0)],
        Times::Timeval => {
            let (s0, u0, s1, u1) = (word(0), word(1), word(2), word(3));
            if !(0..MICROS).contains(&u0) || !(0..MICROS).contains(&u1) {
                return Err(libc::EINVAL);
            }
            [ts(s0, u0 * NANOS_PER_MICRO), ts(s1, u1 * NANOS_PER_MICRO)]
        }
        // Passed on as they are: the kernel checks them (UTIME_NOW, UTIME_OMIT, the range).
        Times::Timespec => [ts(word(0), word(1)), ts(word(2), word(3))],
    })
}
