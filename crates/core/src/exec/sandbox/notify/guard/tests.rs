//! The guard's unit tests.

use super::super::super::bpf::RET_USER_NOTIF;
use super::super::decode::*;
use super::super::objects::*;
use super::super::resolve::*;
use super::decide::*;
use super::filter::{NAME_CALLS, OPEN_CALLS};
use super::*;

/// The guard's call decoded from `nr` and `args` (the handler's own is a test failure).
fn guarded(nr: libc::c_long, args: [u64; 6]) -> Result<GuardCall, i32> {
    match decode(nr, args)? {
        Notified::Guard(call) => Ok(call),
        Notified::Handler(call) => panic!("{nr} decoded as the handler's {call:?}"),
    }
}

/// Whether system call `nr` decodes as the guard's.
fn is_guarded(nr: libc::c_long) -> bool {
    matches!(decode(nr, [0; 6]), Ok(Notified::Guard(_)))
}
use crate::policy::PolicySpec;

fn policy(read: &[&str], write: &[&str]) -> Policy {
    Policy::new(&PolicySpec {
        deny_read: read.iter().map(|s| s.to_string()).collect(),
        deny_write: write.iter().map(|s| s.to_string()).collect(),
        protect: true,
    })
    .unwrap()
}

fn open(p: &Policy, rel: &str, flags: i32, kind: Kind) -> Option<(bool, String)> {
    decide(p, None, Path::new(rel), Access::Open { flags, kind }).map(|(r, d)| (r, d.rule))
}

fn name(p: &Policy, rel: &str, kind: Kind, moves: bool) -> Option<String> {
    decide(p, None, Path::new(rel), Access::Name { kind, moves }).map(|(_, d)| d.rule)
}

/// The notification program's answer to one call.
fn verdict(program: &[libc::sock_filter], nr: u32, args: [u32; 6]) -> u32 {
    super::super::super::bpf::run(program, nr.into(), args.map(u64::from))
}

#[test]
fn the_filter_sends_writes_and_name_changes_and_reads_only_when_asked() {
    let allow = super::super::super::bpf::RET_ALLOW;
    let openat = libc::SYS_openat as u32;
    let flags = |f: i32| [0, 0, f as u32, 0, 0, 0];
    for reads in [false, true] {
        let program = super::super::program(false, Some(Filter { reads })).unwrap();
        for &nr in NAME_CALLS {
            assert_eq!(verdict(&program, nr as u32, [0; 6]), RET_USER_NOTIF, "{nr}");
        }
        for f in [
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_CREAT,
            libc::O_TRUNC | libc::O_RDONLY,
        ] {
            assert_eq!(
                verdict(&program, openat, flags(f)),
                RET_USER_NOTIF,
                "{f:#x}"
            );
        }
        let read = verdict(&program, openat, flags(libc::O_RDONLY | libc::O_CLOEXEC));
        assert_eq!(read, if reads { RET_USER_NOTIF } else { allow });
        // O_PATH ignores the access flags: never notified.
        for f in [libc::O_PATH, libc::O_PATH | libc::O_WRONLY | libc::O_CREAT] {
            assert_eq!(verdict(&program, openat, flags(f)), allow, "{f:#x}");
        }
        // The rest of the program still sees the call's number: flock is notified, read not.
        assert_eq!(
            verdict(&program, libc::SYS_flock as u32, [0; 6]),
            RET_USER_NOTIF
        );
        assert_eq!(
            verdict(&program, libc::SYS_read as u32, flags(libc::O_WRONLY)),
            allow
        );
    }
}

#[test]
fn opens_ask_writes_and_reads_by_their_flags() {
    let p = policy(&[".env", "secrets/**"], &["locked/"]);
    let w = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
    assert_eq!(
        open(&p, ".git/hooks/pre-commit", w, Kind::File),
        Some((false, "**/.git/hooks/".into()))
    );
    assert_eq!(
        open(&p, ".git/hooks/pre-commit", libc::O_RDONLY, Kind::File),
        None
    );
    assert_eq!(open(&p, ".git/index", w, Kind::File), None);
    assert_eq!(
        open(&p, "locked/a", libc::O_APPEND | libc::O_WRONLY, Kind::File).map(|d| d.0),
        Some(false)
    );
    // A denied-read file may be written, not read; O_RDWR reads.
    assert_eq!(open(&p, "a/.env", w, Kind::File), None);
    assert_eq!(
        open(&p, "a/.env", libc::O_RDWR, Kind::File),
        Some((true, ".env".into()))
    );
    assert_eq!(
        open(&p, "a/.env", libc::O_RDONLY, Kind::File),
        Some((true, ".env".into()))
    );
    // O_PATH reads nothing.
    assert_eq!(open(&p, "a/.env", libc::O_PATH, Kind::File), None);
    // Listing a directory whose every entry is denied is a denied read; one with a denied
    // basename in it is not.
    assert_eq!(
        open(&p, "secrets", libc::O_RDONLY | libc::O_DIRECTORY, Kind::Dir),
        Some((true, "secrets/**".into()))
    );
    assert_eq!(
        open(&p, "a", libc::O_RDONLY | libc::O_DIRECTORY, Kind::Dir),
        None
    );
}

#[test]
fn names_ask_renames_for_moves_and_symlinks_as_directories() {
    let p = policy(&["*.pem"], &[]);
    // A symlink named like a protected directory would stand in for it.
    assert_eq!(
        name(&p, ".git/hooks", Kind::Symlink, false).as_deref(),
        Some("**/.git/hooks/")
    );
    assert_eq!(name(&p, ".git/hooks", Kind::File, false), None);
    assert_eq!(
        name(&p, ".git/hooks", Kind::Dir, false).as_deref(),
        Some("**/.git/hooks/")
    );
    // Moving a directory rules name, or a denied-read file, is refused; a plain one is not.
    assert_eq!(
        name(&p, ".git", Kind::Dir, true).as_deref(),
        Some("**/.git/hooks/")
    );
    assert_eq!(
        name(&p, ".git", Kind::Dir, false),
        None,
        "rmdir of .git is a write of .git only"
    );
    assert_eq!(
        name(&p, "k/x.pem", Kind::File, true).as_deref(),
        Some("*.pem")
    );
    assert_eq!(name(&p, "k/x.pem", Kind::File, false), None);
    assert_eq!(
        name(&p, ".git/config", Kind::File, true).as_deref(),
        Some("**/.git/config")
    );
    assert_eq!(name(&p, ".git/config.lock", Kind::File, true), None);
    assert_eq!(name(&p, "src/main.rs", Kind::File, true), None);
}

#[test]
fn places_descriptors_in_the_workspace_by_identity() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let fd = |p: &Path| {
        crate::exec::sandbox::notify::objects::open_path(None, p.as_os_str().as_bytes(), true)
            .unwrap()
    };
    let root_fd = fd(&root);
    let guard = Guard::new(
        Arc::new(policy(&[], &[])),
        (&root, root_fd.as_fd()),
        Path::new("/workspace"),
        None,
    )
    .unwrap()
    .expect("the protected defaults restrict writes");
    assert_eq!(
        guard.place(fd(&root.join("a/b")).as_fd()),
        Place::Inside("a/b".into())
    );
    assert_eq!(guard.place(root_fd.as_fd()), Place::Inside("".into()));
    assert_eq!(guard.place(fd(outside.path()).as_fd()), Place::Outside);
    // A directory renamed since it was opened is placed by its current name, not the old one.
    let a = fd(&root.join("a"));
    std::fs::rename(root.join("a"), root.join("moved")).unwrap();
    std::fs::create_dir(root.join("a")).unwrap();
    assert_eq!(
        guard.place(a.as_fd()),
        Place::Inside("moved".into()),
        "the kernel's current name"
    );
    // A policy that restricts nothing needs no guard.
    let open = Policy::new(&PolicySpec::from_raw(None, None, Some(false))).unwrap();
    assert!(
        Guard::new(Arc::new(open), (&root, root_fd.as_fd()), &root, None)
            .unwrap()
            .is_none()
    );
    assert_eq!(guard.runtime_path(Path::new("x/.env")), "/workspace/x/.env");
    // The workspace's own directory by identity, whatever path reached it: a bind mount
    // elsewhere (namespaces mode shows it at the runtime root too) is still the workspace.
    let alias = tempfile::tempdir().unwrap();
    let mounted = {
        let (src, dst) = (cstr(&root), cstr(alias.path()));
        // SAFETY: a bind mount of our own temp directory onto another (the tests run as root).
        unsafe {
            libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) == 0
        }
    };
    if mounted {
        let through = fd(alias.path());
        assert_eq!(guard.place(through.as_fd()), Place::Inside("".into()));
        // Beneath it, a path that is not the workspace's: not placed inside by name.
        std::fs::create_dir_all(root.join("sub")).unwrap();
        let sub = fd(&alias.path().join("sub"));
        assert_eq!(guard.place(sub.as_fd()), Place::Outside);
        drop((through, sub));
        // SAFETY: unmounting what we mounted above.
        unsafe { libc::umount2(cstr(alias.path()).as_ptr(), libc::MNT_DETACH) };
    }
}

fn cstr(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

#[test]
fn an_entry_is_looked_at_once_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let at = crate::exec::sandbox::notify::objects::open_path(
        None,
        dir.path().as_os_str().as_bytes(),
        true,
    )
    .unwrap();
    // What the walk saw is what every check of the call sees, even after the name changed.
    let resolved = Resolved::entry(dup(at.as_fd()).unwrap(), b"f".to_vec(), None);
    std::fs::write(dir.path().join("f"), "").unwrap();
    assert_eq!(resolved.stat(), None, "the walk saw nothing there");
    assert!(blocking_fifo(&resolved, libc::O_WRONLY).is_none());
    // Looked at on first ask when the walk did not, then kept.
    let unseen = |name: &[u8]| Resolved::Entry {
        dir: dup(at.as_fd()).unwrap(),
        name: name.to_vec(),
        seen: std::cell::OnceCell::new(),
    };
    let fresh = unseen(b"f");
    assert_eq!(fresh.kind(), Some(Kind::File));
    std::fs::remove_file(dir.path().join("f")).unwrap();
    std::fs::create_dir(dir.path().join("f")).unwrap();
    assert_eq!(fresh.kind(), Some(Kind::File), "one answer per call");
    // The next call (a new resolution) sees the change.
    let next = unseen(b"f");
    assert_eq!(next.kind(), Some(Kind::Dir));
    // A FIFO the look saw is still opened to check (its open would wait).
    let fifo = dir.path().join("p");
    let c = cstr(&fifo);
    // SAFETY: mkfifo of a NUL-terminated path in our temp directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let seen = stat_at(at.as_fd(), b"p");
    assert!(seen.is_some());
    let resolved = Resolved::entry(dup(at.as_fd()).unwrap(), b"p".to_vec(), seen);
    assert!(blocking_fifo(&resolved, libc::O_WRONLY).is_some());
    assert!(blocking_fifo(&resolved, libc::O_WRONLY | libc::O_NONBLOCK).is_none());
}

#[test]
fn the_hooks_directory_is_protected_like_the_defaults() {
    let p = policy(&[], &[]);
    let hooks = Some(Path::new("tools/hooks"));
    let w = libc::O_WRONLY | libc::O_CREAT;
    let open = |rel: &str, flags| {
        decide(
            &p,
            hooks,
            Path::new(rel),
            Access::Open {
                flags,
                kind: Kind::File,
            },
        )
        .map(|(_, d)| (d.rule, d.guard))
    };
    let refused = Some((
        super::super::hooks_path::RULE.to_string(),
        crate::policy::Guard::Protected,
    ));
    assert_eq!(open("tools/hooks/pre-commit", w), refused);
    assert_eq!(open("tools/hooks/pre-commit", libc::O_RDONLY), None);
    assert_eq!(open("tools/hooksx/pre-commit", w), None);
    assert_eq!(open("tools/other", w), None);
    let name = |rel: &str, kind, moves| {
        decide(&p, hooks, Path::new(rel), Access::Name { kind, moves }).map(|(_, d)| d.rule)
    };
    // The directory itself and anything made in it; a directory above moved or replaced by a
    // symlink; a directory above made (the hooks directory's own creation stays refused).
    assert!(name("tools/hooks", Kind::Dir, false).is_some());
    assert!(name("tools/hooks/x", Kind::File, false).is_some());
    assert!(name("tools", Kind::Dir, true).is_some());
    assert!(name("tools", Kind::Symlink, false).is_some());
    assert_eq!(name("tools", Kind::Dir, false), None);
    assert_eq!(name("tools/x", Kind::File, true), None);
    assert_eq!(
        name("tools/hooks", Kind::Dir, false),
        name("tools/hooks/y", Kind::File, false)
    );
}

#[test]
fn proc_is_entered_only_at_the_callers_own_directory() {
    // The decision: procfs's root and the caller's own directory; never another process's,
    // nor a file on procfs reached as an object (whose it is cannot be told).
    assert!(proc_decision(ProcEntry::Root));
    assert!(proc_decision(ProcEntry::Own));
    assert!(
        proc_decision(ProcEntry::Other { process: false }),
        "sys, bus"
    );
    assert!(!proc_decision(ProcEntry::Other { process: true }));
    assert!(!proc_decision(ProcEntry::File));
    assert!(
        proc_decision(ProcEntry::Named(true)),
        "a thread of the caller"
    );
    assert!(!proc_decision(ProcEntry::Named(false)));
    // Where a procfs directory lies: the walk up finds the root and the top directory.
    let open = |p: &str| {
        crate::exec::sandbox::notify::objects::open_path(None, p.as_bytes(), true).unwrap()
    };
    assert!(proc_top(open("/proc").as_fd()).unwrap().is_none());
    let me = std::process::id();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let (root, top) = proc_top(open(&format!("/proc/{me}/task/{tid}/fd")).as_fd())
        .unwrap()
        .expect("beneath the root");
    assert!(is_proc_root(root.as_fd()));
    assert_eq!(
        identity(top.as_fd()),
        identity(open(&format!("/proc/{me}")).as_fd())
    );
    assert!(
        stat_at(top.as_fd(), b"task").is_some(),
        "a process directory"
    );
    let (_, sys) = proc_top(open("/proc/sys/kernel").as_fd()).unwrap().unwrap();
    assert!(
        stat_at(sys.as_fd(), b"task").is_none(),
        "not a process directory"
    );
    assert!(is_number(b"123") && !is_number(b"") && !is_number(b"12a") && !is_number(b"self"));
}

#[test]
fn a_unix_socket_address_names_a_path_unless_abstract_or_autobind() {
    let address = |family: i32, path: &[u8]| {
        let mut a = (family as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    };
    assert_eq!(
        unix_path(&address(libc::AF_UNIX, b"a/sock\0")),
        Some(&b"a/sock"[..])
    );
    // The kernel reads up to the first NUL, or the address's end.
    assert_eq!(
        unix_path(&address(libc::AF_UNIX, b"s\0junk")),
        Some(&b"s"[..])
    );
    assert_eq!(unix_path(&address(libc::AF_UNIX, b"s")), Some(&b"s"[..]));
    assert_eq!(unix_path(&address(libc::AF_UNIX, b"\0abstract")), None);
    assert_eq!(unix_path(&address(libc::AF_UNIX, b"")), None, "autobind");
    assert_eq!(
        unix_path(&address(libc::AF_INET, b"\0\x50\x7f\0\0\x01")),
        None
    );
    assert_eq!(unix_path(&[1]), None);
    assert!(matches!(
        guarded(libc::SYS_bind, [3, 0x1000, 12, 0, 0, 0]).unwrap(),
        GuardCall::Bind {
            fd: 3,
            addr: 0x1000,
            len: 12
        }
    ));
    assert!(is_guarded(libc::SYS_bind));
}

#[test]
fn decodes_the_guarded_calls() {
    let flags = (libc::O_WRONLY | libc::O_CREAT) as u64;
    match guarded(libc::SYS_openat, [3, 0x1000, flags, 0o644, 0, 0]).unwrap() {
        GuardCall::Open { at, flags: f, mode } => {
            assert_eq!(
                (at.dirfd, at.path, f as u64, mode),
                (3, 0x1000, flags, 0o644)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        guarded(libc::SYS_renameat2, [1, 2, 3, 4, libc::RENAME_EXCHANGE as u64, 0]).unwrap(),
        GuardCall::Rename { flags, .. } if flags == libc::RENAME_EXCHANGE
    ));
    assert!(matches!(
        guarded(libc::SYS_linkat, [1, 2, 3, 4, libc::AT_EMPTY_PATH as u64, 0]).unwrap(),
        GuardCall::Link { from, follow: false, .. } if from.empty
    ));
    assert_eq!(
        guarded(libc::SYS_linkat, [1, 2, 3, 4, 0x8000, 0]).unwrap_err(),
        libc::EINVAL
    );
    assert!(matches!(
        guarded(
            libc::SYS_unlinkat,
            [1, 2, libc::AT_REMOVEDIR as u64, 0, 0, 0]
        )
        .unwrap(),
        GuardCall::Unlink { dir: true, .. }
    ));
    assert!(is_guarded(libc::SYS_openat));
    assert!(is_guarded(libc::SYS_renameat2));
    assert!(!is_guarded(libc::SYS_read));
    assert!(!is_guarded(libc::SYS_fchmodat));
    // Every call the filter sends the guard decodes as the guard's.
    for &nr in NAME_CALLS.iter().chain(OPEN_CALLS.iter().map(|(nr, _)| nr)) {
        assert!(is_guarded(nr), "{nr}");
    }
}
