//! Finding the supervisor's children through procfs, to kill them. Runs in
//! the forked supervisor: raw system calls on stack buffers only.

use std::os::fd::BorrowedFd;

use crate::sys::{getdents, read_full, DirentBuf};

/// Bytes of `/proc/thread-self/children` read at a time: about 500 pids of
/// 7 digits; a longer list is read in several turns.
const CHILDREN_CHUNK_BYTES: usize = 4096;
/// Bytes of `/proc` entries read at a time when scanning for children.
const PROC_DIRENT_BYTES: usize = 8192;
/// Bytes of `/proc/<pid>/stat` read: the parent pid is its fourth field,
/// after the pid and a command name of at most 64 bytes, so well within.
const STAT_HEAD_BYTES: usize = 512;
/// Digits of the largest pid read: `pid_max` is at most 2^22 (7 digits);
/// 9 digits cannot overflow a `pid_t`.
const PID_DIGITS_MAX: usize = 9;
/// Digits of any non-negative `pid_t` (`i32::MAX` has 10).
const PID_T_DIGITS: usize = 10;

/// SIGKILLs every child of this (single-threaded) process.
///
/// # Safety
///
/// Only in the supervisor (single-threaded, so `thread-self` lists all of its children), whose
/// every child belongs to the tree being killed. Async-signal-safe.
pub(super) unsafe fn kill_children() {
    // SAFETY: a static NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        // SAFETY: the caller's contract, passed on.
        unsafe { kill_children_by_scan() };
        return;
    }
    // SAFETY: `fd` was just opened and is closed only at the end of this function.
    let children = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut buf = [0u8; CHILDREN_CHUNK_BYTES];
    let mut pid: libc::pid_t = 0;
    loop {
        let n = read_full(children, &mut buf).unwrap_or(0);
        for &byte in &buf[..n] {
            if byte.is_ascii_digit() {
                pid = pid * 10 + (byte - b'0') as libc::pid_t;
            } else {
                if pid > 0 {
                    // SAFETY: a child of ours (the caller's contract: all of them may die).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                pid = 0;
            }
        }
        if n < buf.len() {
            break;
        }
    }
    if pid > 0 {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // SAFETY: our descriptor, not used again (`children` is dead).
    unsafe { libc::close(fd) };
}

/// Kernels without CONFIG_PROC_CHILDREN: find our children by the parent field of /proc/<pid>/stat.
///
/// # Safety
///
/// As `kill_children`.
unsafe fn kill_children_by_scan() {
    // SAFETY: a plain getter.
    let me = unsafe { libc::getpid() };
    // SAFETY: a static NUL-terminated path.
    let dir = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return;
    }
    // SAFETY: `dir` was just opened and is closed only at the end of this function.
    let proc = unsafe { BorrowedFd::borrow_raw(dir) };
    let mut buf = DirentBuf::<PROC_DIRENT_BYTES>::new();
    while let Ok(Some(batch)) = getdents(proc, &mut buf) {
        for entry in batch {
            if let Some(pid) = parse_pid(entry.name) {
                if parent_of(pid) == Some(me) {
                    // SAFETY: a child of ours (the caller's contract: all of them may die).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }
    // SAFETY: our descriptor, not used again.
    unsafe { libc::close(dir) };
}

fn parse_pid(digits: &[u8]) -> Option<libc::pid_t> {
    if digits.is_empty() || digits.len() > PID_DIGITS_MAX || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0, |acc, &d| acc * 10 + (d - b'0') as libc::pid_t),
    )
}

/// The parent pid from /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold ')'.
/// Async-signal-safe (stack buffers only).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    const PREFIX: &[u8] = b"/proc/";
    const SUFFIX: &[u8] = b"/stat\0";
    let mut path = [0u8; PREFIX.len() + PID_T_DIGITS + SUFFIX.len()];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; PID_T_DIGITS];
    let mut len = 0;
    let mut rest = pid;
    loop {
        digits[len] = b'0' + (rest % 10) as u8;
        len += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut at = PREFIX.len();
    for i in (0..len).rev() {
        path[at] = digits[i];
        at += 1;
    }
    path[at..at + SUFFIX.len()].copy_from_slice(SUFFIX);
    // SAFETY: `path` is NUL-terminated (SUFFIX ends with the NUL).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut stat = [0u8; STAT_HEAD_BYTES];
    // SAFETY: `fd` was just opened and is closed right after this read.
    let n = read_full(unsafe { BorrowedFd::borrow_raw(fd) }, &mut stat);
    // SAFETY: our descriptor, not used again.
    unsafe { libc::close(fd) };
    let stat = &stat[..n.ok().filter(|&n| n > 0)?];
    let close_paren = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close_paren + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    fields.next()?; // state
    parse_pid(fields.next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_plain_digits_of_bounded_length() {
        assert_eq!(parse_pid(b"4194304"), Some(4_194_304));
        assert_eq!(parse_pid(b"999999999"), Some(999_999_999));
        for bad in [&b""[..], b"self", b"12a", b"-1", b"1234567890", b".", b".."] {
            assert_eq!(parse_pid(bad), None, "{:?}", std::str::from_utf8(bad));
        }
    }

    #[test]
    fn parent_of_reads_the_stat_file() {
        // SAFETY: plain system calls on our own pid.
        unsafe {
            assert_eq!(parent_of(libc::getpid()), Some(libc::getppid()));
            let mut child = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .unwrap();
            let parent = parent_of(child.id() as libc::pid_t);
            child.kill().unwrap();
            child.wait().unwrap();
            assert_eq!(parent, Some(libc::getpid()));
            assert_eq!(parent_of(i32::MAX), None);
        }
    }
}
