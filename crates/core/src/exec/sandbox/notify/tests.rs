//! The notification handler's unit tests.

use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::super::seccomp::SYS_SETXATTRAT;
use super::caller::*;
use super::decode::*;
use super::metadata::*;
use super::objects::*;
use super::*;

/// The handler's own call decoded from `nr` and `args` (a guard's call is a test failure).
fn handler_call(nr: libc::c_long, args: [u64; 6]) -> Result<Call, i32> {
    match decode(nr, args)? {
        Notified::Handler(call) => Ok(call),
        Notified::Guard(call) => panic!("{nr} decoded as the guard's {call:?}"),
    }
}

/// `target.resolve` of `path` (in this process's memory: the caller is this process).
fn resolve_here(
    target: &Target<'_>,
    dirfd: i32,
    path: &std::ffi::CStr,
    follow: bool,
) -> Result<(u64, u64), i32> {
    let object = Object::Path {
        dirfd,
        path: path.as_ptr() as u64,
        follow,
        empty: false,
    };
    target
        .resolve(object)
        .map(|fd| identity(fd.as_fd()).unwrap())
}

#[test]
fn paths_resolve_as_the_kernel_would_for_the_caller() {
    let dir = Dir::new("resolve");
    let file = dir.0.join("file");
    std::fs::write(&file, b"x").unwrap();
    std::os::unix::fs::symlink("file", dir.0.join("link")).unwrap();
    let want = identity(o_path(&file, true).as_fd()).unwrap();
    let link = identity(o_path(&dir.0.join("link"), false).as_fd()).unwrap();
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let pidfds = Pidfds::default();
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let target = Target::new(&listener, &pidfds, me, 0);
    let held = std::fs::File::open(&file).unwrap();
    let dirfd = std::fs::File::open(&dir.0).unwrap();
    let c = |s: String| std::ffi::CString::new(s).unwrap();
    let cwd = libc::AT_FDCWD;
    let absolute = c(format!("{}/link", dir.0.display()));
    assert_eq!(resolve_here(&target, cwd, &absolute, true), Ok(want));
    assert_eq!(resolve_here(&target, cwd, &absolute, false), Ok(link));
    assert_eq!(
        resolve_here(&target, dirfd.as_raw_fd(), c"link", true),
        Ok(want)
    );
    let name = dir.0.file_name().unwrap().to_str().unwrap();
    let up = c(format!("../{name}/./file"));
    assert_eq!(
        resolve_here(&target, dirfd.as_raw_fd(), &up, true),
        Ok(want)
    );
    assert_eq!(
        resolve_here(&target, dirfd.as_raw_fd(), c"gone", true),
        Err(libc::ENOENT)
    );
    // The caller's own `/proc/self/fd/N` (glibc's fchmodat fallback): its descriptor's object.
    let own = c(format!("/proc/self/fd/{}", held.as_raw_fd()));
    assert_eq!(resolve_here(&target, cwd, &own, true), Ok(want));
    let own = c(format!("/proc/thread-self/fd/{}", held.as_raw_fd()));
    assert_eq!(resolve_here(&target, cwd, &own, true), Ok(want));
    // Another process's `/proc/<pid>` is never entered.
    let mut other = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let theirs = c(format!("/proc/{}/cwd", other.id()));
    assert_eq!(resolve_here(&target, cwd, &theirs, true), Err(libc::EACCES));
    let theirs = c(format!("/proc/{}/status", other.id()));
    assert_eq!(resolve_here(&target, cwd, &theirs, true), Err(libc::EACCES));
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn beneath_matches_whole_components() {
    assert_eq!(beneath(b"/ws/a/b", b"/ws"), Some(&b"a/b"[..]));
    assert_eq!(beneath(b"/ws", b"/ws"), Some(&b""[..]));
    assert_eq!(beneath(b"/wsx/a", b"/ws"), None);
    assert_eq!(beneath(b"/etc/passwd", b"/ws"), None);
    assert_eq!(beneath(b"/etc/passwd", b"/"), Some(&b"etc/passwd"[..]));
}

#[test]
fn a_kept_pidfd_of_a_process_gone_is_replaced() {
    // A pidfd kept under our pid that names a process which has exited and been reaped: what
    // the cache holds when a pid is reused. The copy must come from the caller (us) anyway.
    // SAFETY: the child only calls _exit.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: async-signal-safe exit in the forked child.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: pidfd_open of our child before it is reaped.
    let gone = unsafe { libc::syscall(libc::SYS_pidfd_open, child, 0) };
    assert!(gone >= 0, "pidfd_open: {}", io::Error::last_os_error());
    // SAFETY: reaping our own child; a null status pointer is allowed.
    let reaped = unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    assert_eq!(reaped, child);
    // SAFETY: a descriptor we just got.
    let gone = Rc::new(unsafe { OwnedFd::from_raw_fd(gone as RawFd) });

    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let pidfds = Pidfds::default();
    pidfds.keep(me, &gone);
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let file = std::fs::File::open("/proc/self/status").unwrap();
    let target = Target::new(&listener, &pidfds, me, 0);
    let copy = target
        .fd(file.as_raw_fd())
        .expect("a copy of our own descriptor");
    assert_eq!(identity(copy.as_fd()), identity(file.as_fd()));
    // The fresh pidfd is kept for the next call of this caller.
    assert!(!Rc::ptr_eq(&pidfds.get(me).unwrap(), &gone));
    // A copy through a pidfd opened for this call does not prove the caller by itself.
    assert!(!target.fd_proven());
    // The next call's copy goes through the kept pidfd, which does.
    let next = Target::new(&listener, &pidfds, me, 0);
    next.fd(file.as_raw_fd())
        .expect("a copy through the kept pidfd");
    assert!(next.fd_proven());
    // A first call (nothing kept) proves nothing either.
    let fresh = Pidfds::default();
    let first = Target::new(&listener, &fresh, me, 0);
    first
        .fd(file.as_raw_fd())
        .expect("a copy through a new pidfd");
    assert!(!first.fd_proven());
    // A failed copy proves nothing.
    assert_eq!(next.fd(-5).map(drop), Err(libc::EBADF));
    let closed = Target::new(&listener, &pidfds, me, 0);
    assert!(closed.fd(1 << 20).is_err());
    assert!(!closed.fd_proven());
}

/// Waits (a bounded number of times, never on the clock alone) until `ready` holds.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("never: {what}");
}

#[test]
fn the_cwd_is_read_anew_through_the_kept_proc_dir() {
    let base = Dir::new("cwd");
    let (a, b, c) = (base.0.join("a"), base.0.join("b"), base.0.join("c"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // A shell that changes its cwd when told (one line on stdin each time).
    let mut shell = std::process::Command::new("sh")
        .args(["-c", "cd \"$1\" && read x && cd \"$2\" && read y", "sh"])
        .arg(&a)
        .arg(&b)
        .current_dir(&base.0)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = shell.id() as libc::pid_t;
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let pidfds = Pidfds::default();
    let proven = std::cell::Cell::new(false);
    let cwd = || {
        let target = Target::new(&listener, &pidfds, pid, 0);
        let mut out = b"prefix:".to_vec();
        let read = target.cwd_into(&mut out).map(|()| out[7..].to_vec());
        proven.set(target.cwd_proven());
        read
    };
    let path = |p: &Path| Some(p.as_os_str().as_bytes().to_vec());
    assert!(cwd().is_some());
    assert!(
        !proven.get(),
        "read through a directory opened for this call"
    );
    wait_until("the shell is in a", || cwd() == path(&a));
    assert!(proven.get(), "read through the kept directory");
    let kept = pidfds
        .proc_dir
        .borrow()
        .as_ref()
        .map(|(p, fd)| (*p, fd.as_raw_fd()));
    assert_eq!(kept.map(|(p, _)| p), Some(pid));
    // chdir: seen on the next call through the same kept directory.
    use std::io::Write;
    shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    wait_until("the shell is in b", || cwd() == path(&b));
    // Its cwd renamed under it: the new name.
    std::fs::rename(&b, &c).unwrap();
    assert_eq!(cwd(), path(&c));
    let still = pidfds
        .proc_dir
        .borrow()
        .as_ref()
        .map(|(p, fd)| (*p, fd.as_raw_fd()));
    assert_eq!(still, kept, "the kept directory served every call");
    // Another caller (we, while the shell lives) does not get the kept directory's answer.
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let ours = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
    let mut out = Vec::new();
    Target::new(&listener, &pidfds, me, 0)
        .cwd_into(&mut out)
        .unwrap();
    assert_eq!(Some(out), path(&ours));
    assert_eq!(cwd(), path(&c), "and the shell's is read anew");
    assert!(!proven.get(), "through a directory opened anew");
    // Gone: a kept directory answers nothing (no other process has its pid yet).
    shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    shell.wait().unwrap();
    assert_eq!(cwd(), None);
    assert!(!proven.get());
}

#[test]
fn the_root_and_cwd_open_through_the_kept_proc_dir() {
    let base = Dir::new("proc-open");
    let (a, b) = (base.0.join("a"), base.0.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let mut shell = std::process::Command::new("sh")
        .args(["-c", "cd \"$1\" && read x && cd \"$2\" && read y", "sh"])
        .arg(&a)
        .arg(&b)
        .current_dir(&base.0)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = shell.id() as libc::pid_t;
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let pidfds = Pidfds::default();
    let open = |name: &std::ffi::CStr| {
        Target::new(&listener, &pidfds, pid, 0)
            .proc_open(name)
            .map(|fd| identity(fd.as_fd()))
    };
    let id = |p: &Path| Ok(identity(o_path(p, true).as_fd()));
    wait_until("the shell is in a", || open(c"cwd") == id(&a));
    let kept = pidfds
        .proc_dir
        .borrow()
        .as_ref()
        .map(|(p, fd)| (*p, fd.as_raw_fd()));
    assert_eq!(kept.map(|(p, _)| p), Some(pid));
    let target = Target::new(&listener, &pidfds, pid, 0);
    assert_eq!(
        target.proc_open(c"root").map(|fd| identity(fd.as_fd())),
        id(Path::new("/"))
    );
    assert!(target.cwd_proven(), "opened through the kept directory");
    use std::io::Write;
    shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    wait_until("the shell is in b", || open(c"cwd") == id(&b));
    let still = pidfds
        .proc_dir
        .borrow()
        .as_ref()
        .map(|(p, fd)| (*p, fd.as_raw_fd()));
    assert_eq!(still, kept, "the kept directory served every call");
    // Another caller gets its own, and the kept one is replaced by its.
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let ours = Target::new(&listener, &pidfds, me, 0)
        .proc_open(c"cwd")
        .map(|fd| identity(fd.as_fd()));
    assert_eq!(ours, id(&std::env::current_dir().unwrap()));
    assert_eq!(pidfds.proc_dir.borrow().as_ref().map(|(p, _)| *p), Some(me));
    // Gone: nothing opens (no other process has its pid yet).
    shell.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    shell.wait().unwrap();
    assert!(open(c"cwd").is_err());
    // A kept directory of a process gone, under our pid: ours is opened anew.
    let child = std::process::Command::new("true").spawn().unwrap();
    let gone = o_path(Path::new(&format!("/proc/{}", child.id())), true);
    let mut child = child;
    child.wait().unwrap();
    *pidfds.proc_dir.borrow_mut() = Some((me, gone));
    let target = Target::new(&listener, &pidfds, me, 0);
    let again = target.proc_open(c"cwd").map(|fd| identity(fd.as_fd()));
    assert_eq!(again, id(&std::env::current_dir().unwrap()));
    assert!(!target.cwd_proven(), "the kept directory did not answer");
}

#[test]
fn a_kept_proc_dir_of_a_process_gone_is_replaced() {
    // What the cache holds when a pid is reused: a /proc directory of an exited process
    // kept under our pid. The cwd read must be ours anyway.
    let child = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = child.id();
    let gone = o_path(Path::new(&format!("/proc/{gone_pid}")), true);
    let mut child = child;
    child.wait().unwrap();
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let pidfds = Pidfds::default();
    *pidfds.proc_dir.borrow_mut() = Some((me, gone));
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let target = Target::new(&listener, &pidfds, me, 0);
    let mut out = Vec::new();
    target.cwd_into(&mut out).expect("our own cwd");
    assert!(!target.cwd_proven(), "the kept directory did not answer");
    let ours = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
    assert_eq!(out, ours.as_os_str().as_bytes());
    let kept = pidfds.proc_dir.borrow();
    let (pid, dir) = kept.as_ref().unwrap();
    assert_eq!(*pid, me);
    assert_eq!(
        identity(dir.as_fd()),
        identity(o_path(Path::new("/proc/self"), true).as_fd())
    );
}

#[test]
fn the_fast_path_opens_only_beneath_an_area() {
    // The caller is this process: its cwd is the area (the crate's directory), its paths are
    // C strings in our memory.
    let cwd = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
    let outside = Dir::new("fast-outside");
    std::fs::write(outside.0.join("out"), "").unwrap();
    let policy = Policy::landlock(
        vec![super::area(&cwd).unwrap()],
        area_fd(&cwd).as_fd(),
        None,
    )
    .unwrap();
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let pidfds = Pidfds::default();
    let target = Target::new(&listener, &pidfds, me, 0);
    let open = |path: &[u8], follow: bool| {
        let c = std::ffi::CString::new(path).unwrap();
        let object = Object::Path {
            dirfd: libc::AT_FDCWD,
            path: c.as_ptr() as u64,
            follow,
            empty: false,
        };
        policy
            .open_beneath(&target, object)
            .and_then(|fd| identity(fd.as_fd()))
    };
    let id = |p: &Path| identity(o_path(p, true).as_fd());
    assert_eq!(open(b"Cargo.toml", true), id(&cwd.join("Cargo.toml")));
    assert_eq!(
        open(b"src/../Cargo.toml", true),
        id(&cwd.join("Cargo.toml"))
    );
    assert_eq!(open(b"src/", true), id(&cwd.join("src")));
    assert_eq!(open(b".", true), id(&cwd));
    let absolute = cwd.as_os_str().as_bytes();
    assert_eq!(open(absolute, true), id(&cwd), "the area itself");
    assert_eq!(
        open(&[absolute, b"/src/lib.rs"].concat(), true),
        id(&cwd.join("src/lib.rs"))
    );
    // Anything that leaves the area is not for the fast path (resolved and checked instead).
    assert_eq!(open(b"../Cargo.toml", true), None);
    assert_eq!(
        open(outside.0.join("out").as_os_str().as_bytes(), true),
        None
    );
    assert_eq!(open(b"", true), None);
    // A symlink in the area to the outside: followed, it leaves; not followed, it is inside.
    let link = cwd.join(format!("pno-fast-link-{}", std::process::id()));
    std::os::unix::fs::symlink(outside.0.join("out"), &link).unwrap();
    let name = link.file_name().unwrap().as_bytes().to_vec();
    let followed = open(&name, true);
    let itself = open(&name, false);
    std::fs::remove_file(&link).unwrap();
    assert_eq!(followed, None);
    assert!(itself.is_some());
    // The buffers are reused: a long path, then a short one.
    let long = [&b"src/"[..], &b"./"[..].repeat(1000), b"lib.rs"].concat();
    assert_eq!(open(&long, true), id(&cwd.join("src/lib.rs")));
    assert_eq!(open(b"src", true), id(&cwd.join("src")));
}

#[test]
fn reads_a_path_into_the_reused_buffer() {
    const PAGE: usize = 4096;
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
    let pidfds = Pidfds::default();
    let target = Target::new(&listener, &pidfds, me, 0);
    // SAFETY: a fresh anonymous mapping of three pages, ours; the third is unmapped again so
    // that a read past the second page faults.
    let base = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            3 * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(libc::munmap(p.cast::<u8>().add(2 * PAGE).cast(), PAGE), 0);
        p.cast::<u8>()
    };
    let put = |at: usize, bytes: &[u8]| {
        assert!(at + bytes.len() <= 2 * PAGE);
        // SAFETY: within the two mapped pages.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(at), bytes.len()) };
        base as u64 + at as u64
    };
    let mut buf = Vec::new();
    let read =
        |addr: u64, buf: &mut Vec<u8>| target.string_into(addr, buf).map(|n| buf[..n].to_vec());
    // Across a page boundary.
    let across = put(PAGE - 3, b"dir/file\0");
    assert_eq!(read(across, &mut buf), Ok(b"dir/file".to_vec()));
    // Ending just before the unmapped page: no read past it.
    let last = put(2 * PAGE - 4, b"abc\0");
    assert_eq!(read(last, &mut buf), Ok(b"abc".to_vec()));
    // A shorter path after a longer one, in the same buffer.
    let short = put(10, b"x\0");
    assert_eq!(read(short, &mut buf), Ok(b"x".to_vec()));
    let empty = put(20, b"\0");
    assert_eq!(read(empty, &mut buf), Ok(Vec::new()));
    // No NUL before the unmapped page: a fault; NULL: a fault.
    put(2 * PAGE - 2, b"yz");
    assert_eq!(
        read(base as u64 + 2 * PAGE as u64 - 2, &mut buf),
        Err(libc::EFAULT)
    );
    assert_eq!(read(0, &mut buf), Err(libc::EFAULT));
    // No NUL within PATH_MAX bytes (the two pages hold 8 KiB of 'a'): too long.
    // SAFETY: within the two mapped pages.
    unsafe { std::ptr::write_bytes(base, b'a', 2 * PAGE) };
    assert_eq!(read(base as u64, &mut buf), Err(libc::ENAMETOOLONG));
    // SAFETY: the two pages mapped above, no longer used.
    unsafe { libc::munmap(base.cast(), 2 * PAGE) };
}

#[test]
fn decodes_paths_flags_and_descriptors() {
    let p = 0x1000u64;
    let call = handler_call(
        SYS_FCHMODAT2,
        [3, p, 0o644, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0],
    );
    assert_eq!(
        call,
        Ok(Call {
            object: Object::Path {
                dirfd: 3,
                path: p,
                follow: false,
                empty: false
            },
            op: Op::Chmod(0o644)
        })
    );
    assert_eq!(
        handler_call(libc::SYS_fchownat, [3, p, 1, 2, 0x8000, 0]),
        Err(libc::EINVAL)
    );
    // utimensat(fd, NULL, times, 0) acts on the descriptor; with flags it is refused.
    assert_eq!(
        handler_call(libc::SYS_utimensat, [5, 0, 0, 0, 0, 0]).map(|c| c.object),
        Ok(Object::Fd(5))
    );
    assert_eq!(
        handler_call(
            libc::SYS_utimensat,
            [5, 0, 0, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0]
        ),
        Err(libc::EINVAL)
    );
    assert_eq!(
        handler_call(libc::SYS_utimensat, [libc::AT_FDCWD as u64, 0, 0, 0, 0, 0]),
        Err(libc::EFAULT)
    );
    assert_eq!(
        handler_call(libc::SYS_lsetxattr, [p, 2, 3, 4, 1, 0]).map(|c| c.object),
        Ok(Object::Path {
            dirfd: libc::AT_FDCWD,
            path: p,
            follow: false,
            empty: false
        })
    );
    assert_eq!(
        handler_call(
            SYS_SETXATTRAT,
            [7, 0, libc::AT_EMPTY_PATH as u64, 9, 10, 16]
        ),
        Ok(Call {
            object: Object::Path {
                dirfd: 7,
                path: 0,
                follow: true,
                empty: true
            },
            op: Op::SetXattrArgs {
                name: 9,
                args: 10,
                size: 16
            }
        })
    );
    assert_eq!(
        handler_call(libc::SYS_fcntl, [4, libc::F_OFD_SETLKW as u64, p, 0, 0, 0]),
        Ok(Call {
            object: Object::Fd(4),
            op: Op::Lock(libc::F_OFD_SETLKW, p)
        })
    );
    assert_eq!(
        handler_call(
            libc::SYS_inotify_add_watch,
            [3, p, libc::IN_DONT_FOLLOW as u64 | 2, 0, 0, 0]
        ),
        Ok(Call {
            object: Object::Path {
                dirfd: libc::AT_FDCWD,
                path: p,
                follow: false,
                empty: false
            },
            op: Op::Watch {
                inotify: 3,
                mask: libc::IN_DONT_FOLLOW | 2
            }
        })
    );
    assert_eq!(handler_call(libc::SYS_read, [0; 6]), Err(libc::ENOSYS));
}

/// A fresh directory under the system temp dir, removed on drop.
struct Dir(std::path::PathBuf);
impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("pno-notify-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Any descriptor stands in for the ruleset where no watch is made.
fn area_fd(path: &Path) -> OwnedFd {
    o_path(path, true)
}

fn o_path(path: &Path, follow: bool) -> OwnedFd {
    open_path(None, path.as_os_str().as_bytes(), follow).unwrap()
}

#[test]
fn containment_is_judged_on_the_object_opened() {
    let area = Dir::new("area");
    let outside = Dir::new("outside");
    let policy = Policy::landlock(
        vec![super::area(&area.0).unwrap()],
        area_fd(&area.0).as_fd(),
        None,
    )
    .unwrap();
    std::fs::write(area.0.join("in"), "").unwrap();
    std::fs::write(outside.0.join("out"), "").unwrap();
    std::os::unix::fs::symlink(outside.0.join("out"), area.0.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside.0, area.0.join("dirlink")).unwrap();
    let inside = |p: std::path::PathBuf, follow: bool| policy.inside(o_path(&p, follow).as_fd());
    assert!(inside(area.0.clone(), true), "the area itself");
    assert!(inside(area.0.join("in"), true));
    assert!(!inside(outside.0.join("out"), true));
    assert!(
        !inside(area.0.join("link"), true),
        "a symlink's outside target"
    );
    assert!(inside(area.0.join("link"), false), "the symlink itself");
    assert!(
        !inside(area.0.join("dirlink/out"), true),
        "through a symlinked directory"
    );
    // An unlinked file has no path beneath the area any more: refused.
    let gone = o_path(&area.0.join("in"), true);
    std::fs::remove_file(area.0.join("in")).unwrap();
    assert!(!policy.inside(gone.as_fd()));
    // A writable file (`readWrite` may name one) is inside; nothing is beneath it.
    let file_area = area.0.join("alone");
    std::fs::write(&file_area, "").unwrap();
    let by_file = Policy::landlock(
        vec![super::area(&file_area).unwrap()],
        area_fd(&area.0).as_fd(),
        None,
    )
    .unwrap();
    assert!(by_file.inside(o_path(&file_area, true).as_fd()));
    assert!(!by_file.inside(o_path(&area.0, true).as_fd()));
    // A sibling whose name starts with the area's is not beneath it.
    let sibling = std::path::PathBuf::from(format!("{}x", area.0.display()));
    std::fs::create_dir_all(&sibling).unwrap();
    assert!(!inside(sibling.clone(), true));
    std::fs::remove_dir_all(&sibling).unwrap();
}

#[test]
fn namespaces_mode_judges_the_mount() {
    let dir = Dir::new("mount");
    let policy = Policy::namespaces(None).unwrap();
    assert!(
        policy.inside(o_path(&dir.0, true).as_fd()),
        "a writable mount"
    );
    // /proc/sys is mounted read-only in most containers; /sys often is too. Where neither
    // is, this part proves nothing and is skipped.
    for ro in ["/proc/sys", "/sys"] {
        let fd = o_path(Path::new(ro), true);
        // SAFETY: a zeroed statvfs is a valid buffer.
        let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatvfs into our buffer.
        if unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut fs) } == 0
            && fs.f_flag & libc::ST_RDONLY != 0
        {
            assert!(!policy.inside(fd.as_fd()), "{ro} is read-only");
        }
    }
}

#[test]
fn decodes_times() {
    let words = |w: [i64; 4]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
    let t = decode_times(Times::Timeval, &words([10, 5, 20, 999_999])).unwrap();
    assert_eq!((t[0].tv_sec, t[0].tv_nsec), (10, 5_000));
    assert_eq!((t[1].tv_sec, t[1].tv_nsec), (20, 999_999_000));
    assert_eq!(
        decode_times(Times::Timeval, &words([10, 1_000_000, 0, 0])).map(|_| ()),
        Err(libc::EINVAL)
    );
    let t = decode_times(Times::Utimbuf, &words([7, 8, 0, 0])[..16]).unwrap();
    assert_eq!((t[0].tv_sec, t[1].tv_sec, t[1].tv_nsec), (7, 8, 0));
}

/// The notification program's answer to one call (`arg1`: its second argument).
fn verdict(program: &[sock_filter], nr: u32, arg1: u32) -> u32 {
    bpf::run(program, nr.into(), [0, arg1.into(), 0, 0, 0, 0])
}

#[test]
fn the_filter_notifies_only_what_it_must() {
    let landlock = program(true, None).unwrap();
    let namespaces = program(false, None).unwrap();
    for &nr in MODE_OWNER_TIME_CALLS.iter().chain(XATTR_CALLS) {
        assert_eq!(verdict(&landlock, nr as u32, 0), RET_USER_NOTIF, "{nr}");
        assert_eq!(verdict(&namespaces, nr as u32, 0), RET_ALLOW, "{nr}");
    }
    let watch = libc::SYS_inotify_add_watch as u32;
    assert_eq!(verdict(&landlock, watch, 0), RET_USER_NOTIF);
    assert_eq!(verdict(&namespaces, watch, 0), RET_ALLOW);
    for &nr in WATCH_DENIED {
        let refused = ret_errno(libc::EPERM);
        assert_eq!(verdict(&landlock, nr as u32, 0), refused, "{nr}");
        assert_eq!(verdict(&namespaces, nr as u32, 0), RET_ALLOW, "{nr}");
    }
    for p in [&landlock, &namespaces] {
        assert_eq!(verdict(p, libc::SYS_flock as u32, 0), RET_USER_NOTIF);
        for &cmd in LOCK_COMMANDS {
            assert_eq!(
                verdict(p, libc::SYS_fcntl as u32, cmd as u32),
                RET_USER_NOTIF
            );
        }
        for cmd in [
            libc::F_GETFL,
            libc::F_SETFD,
            libc::F_DUPFD_CLOEXEC,
            libc::F_GETLK,
        ] {
            assert_eq!(verdict(p, libc::SYS_fcntl as u32, cmd as u32), RET_ALLOW);
        }
        for nr in [libc::SYS_read, libc::SYS_openat, libc::SYS_write] {
            assert_eq!(verdict(p, nr as u32, 0), RET_ALLOW);
        }
    }
}
