//! `flock` and `fcntl` locks (both modes): refused outside the writable areas; a blocking lock
//! is waited for on a thread of its own.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use super::answer::{id_valid, respond, result};
use super::caller::Target;
use super::decode::{Call, Object, Op};
use super::{drop_own_capabilities, Policy, Reply, HANDLER_STACK_BYTES};
use crate::sys::errno;

/// A waiter for a blocking lock retries at growing intervals from the first to the second, and
/// checks each time whether the caller still waits (a signal or a kill ends its call).
const LOCK_RETRY_FIRST: Duration = Duration::from_millis(1);
const LOCK_RETRY_MAX: Duration = Duration::from_millis(50);

/// Refused locks outside the writable areas: "no locks available".
const REFUSED_LOCK: i32 = libc::ENOLCK;

/// `flock` and `fcntl` locks: refused outside the writable areas; `flock` and OFD locks are
/// taken on our copy of the open file (the same lock), classic POSIX locks are left to the kernel.
pub(super) fn lock(policy: &Policy, target: &Target<'_>, call: Call) -> Result<Reply, i32> {
    let Object::Fd(fd) = call.object else {
        return Err(libc::EINVAL);
    };
    let copy = target.fd(fd)?;
    let request = match call.op {
        Op::Lock(_, ptr) => {
            let raw = target.read(ptr, size_of::<libc::flock>())?;
            // SAFETY: `raw` holds exactly one `struct flock` (plain integers).
            Some(unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<libc::flock>()) })
        }
        _ => None,
    };
    if !target.valid() {
        return Err(libc::ENOENT);
    }
    if !policy.inside(copy.as_fd()) {
        return Err(REFUSED_LOCK);
    }
    match (call.op, request) {
        (Op::Lock(libc::F_SETLK | libc::F_SETLKW, _), _) => Ok(Reply::Continue),
        (Op::Lock(cmd, _), Some(mut fl)) => {
            let blocking = cmd == libc::F_OFD_SETLKW;
            let raw = copy.as_raw_fd();
            let first = {
                // SAFETY: fcntl on our copy with our flock.
                unsafe { libc::fcntl(raw, libc::F_OFD_SETLK, &mut fl) as libc::c_long }
            };
            if !blocking || first >= 0 || !would_block(errno()) {
                return Ok(result(first));
            }
            let undo = fl;
            let listener = Arc::clone(target.listener);
            let id = target.id;
            wait_for_lock(
                listener,
                id,
                copy,
                move |fd| {
                    let mut fl = fl;
                    // SAFETY: fcntl on our copy with our flock.
                    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) as libc::c_long }
                },
                move |fd| {
                    let mut fl = undo;
                    fl.l_type = libc::F_UNLCK as _;
                    // SAFETY: fcntl on our copy with our flock.
                    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) };
                },
            )
        }
        (Op::Flock(operation), _) => {
            let raw = copy.as_raw_fd();
            // SAFETY: flock on our copy.
            let first = unsafe { libc::flock(raw, operation | libc::LOCK_NB) } as libc::c_long;
            let blocking = operation & (libc::LOCK_NB | libc::LOCK_UN) == 0;
            if !blocking || first >= 0 || !would_block(errno()) {
                return Ok(result(first));
            }
            let listener = Arc::clone(target.listener);
            let id = target.id;
            wait_for_lock(
                listener,
                id,
                copy,
                // SAFETY: flock on our copy.
                move |fd| unsafe { libc::flock(fd, operation | libc::LOCK_NB) } as libc::c_long,
                // SAFETY: flock on our copy.
                move |fd| unsafe {
                    libc::flock(fd, libc::LOCK_UN);
                },
            )
        }
        _ => Err(libc::EINVAL),
    }
}

fn would_block(code: i32) -> bool {
    code == libc::EAGAIN || code == libc::EWOULDBLOCK || code == libc::EACCES
}

/// A blocking lock the handler must not wait for: a waiter thread retries it (without blocking)
/// while the caller still waits, answers when it is taken, and gives it back if the caller is
/// gone by then.
fn wait_for_lock(
    listener: Arc<OwnedFd>,
    id: u64,
    copy: OwnedFd,
    attempt: impl Fn(RawFd) -> libc::c_long + Send + 'static,
    undo: impl Fn(RawFd) + Send + 'static,
) -> Result<Reply, i32> {
    std::thread::Builder::new()
        .name("pi-sandbox-lock".into())
        .stack_size(HANDLER_STACK_BYTES)
        .spawn(move || {
            drop_own_capabilities();
            let mut delay = LOCK_RETRY_FIRST;
            loop {
                std::thread::sleep(delay);
                delay = (delay * 2).min(LOCK_RETRY_MAX);
                if !id_valid(listener.as_fd(), id) {
                    return;
                }
                let r = attempt(copy.as_raw_fd());
                if r < 0 && would_block(errno()) {
                    continue;
                }
                let reply = result(r);
                if !respond(listener.as_fd(), id, reply) && r >= 0 {
                    undo(copy.as_raw_fd());
                }
                return;
            }
        })
        .map(|_| Reply::Later)
        .map_err(|_| libc::ENOLCK)
}
