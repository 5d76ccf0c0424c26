//! Namespaces mode: the plan of the sandbox's filesystem, built here before any fork, and the
//! forked children that carry it out (`init`): the template's builder, which makes its fixed part
//! once, and each command's init, which adds the command's own part (raw system calls only).
//!
//! The **template** is a user namespace, a mount namespace holding the finished root (system
//! directories read-only, secrets masked, `/dev`, the workspace and the caller's binds, the whole
//! root read-only) and, without network, a network namespace with its loopback up. A short-lived
//! fork of Node builds it on the first exec of a `Prepared` sandbox; Node keeps descriptors of the
//! three namespaces (they live as long as a descriptor or a process holds them: nothing is left
//! when Node exits, however it exits) and the builder exits.
//!
//! **Each command**: the supervisor joins the template's namespaces (`setns`) and clones the init
//! into a new mount namespace (a private copy of the template's: nothing it mounts reaches the
//! template or another command), a new PID namespace (the tree dies totally with the init), and
//! new IPC and UTS namespaces (SysV IPC objects outlive their processes). The init mounts a fresh
//! `/proc`, a private tmpfs `/tmp` and `/dev/shm` (the only writable places besides the
//! workspace and the caller's read-write binds), and starts the shell.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::paths::{mounts, Held, Kind, Mount, Resolved};
use super::policy::{present_secrets, DEV, DEVICES, ETC, SYSTEM_DIRS};
use super::setup::{c_path, invalid_spec, step_error, Step};
use super::{Sandbox, DEFAULT_MAX_PROCESSES};
use crate::exec::supervisor::{close_all_except, ShellStart};
use crate::sys::read_full;
use init::{Action, Script, Template};

mod init;

/// An empty file and directory (mode 000) in the template's `/tmp`, sources of each command's
/// masks of `/proc` entries; the command's own tmpfs on `/tmp` then hides them.
const EMPTY_FILE: &str = "/tmp/.pi-sandbox-empty";
const EMPTY_DIR: &str = "/tmp/.pi-sandbox-emptydir";
/// Each command's private tmpfs mounts, and where each is mounted first (a directory of the
/// template), so that binds the template holds under it can be moved onto it before it takes
/// its place.
const PRIVATE_TMPFS: &[&str] = &["/tmp", "/dev/shm"];
const STAGING_NAME: &str = ".pi-sandbox-next";
/// `/proc` entries that are host-wide, not per PID namespace: read-only, or masked where reading
/// leaks kernel state. The shell of a root caller is uid 0 of the host (without capabilities), and
/// uid 0 may write root's sysctls (core_pattern runs a program as host root) and sysrq-trigger by
/// their file modes alone: the list docker uses for containers without a user namespace.
const PROC_READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];
const PROC_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/acpi",
    "/proc/scsi",
    "/proc/asound",
];
/// `/dev` symlinks into the shell's own descriptors.
const DEV_LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];
/// The kernel's `RESERVED_PIDS`: once a PID namespace's pids pass it, new ones wrap around to it
/// (not to 1), so `pid_max = RESERVED_PIDS + limit` still leaves room for `limit` processes
/// after many short-lived ones, and never allows more than `limit + RESERVED_PIDS`.
const RESERVED_PIDS: u32 = 300;
/// The first kernel that counts RLIMIT_NPROC per user namespace (ucounts, 5.14): before it the
/// limit counts the user's processes machine-wide and would refuse a busy user's sandbox.
const NPROC_PER_USERNS: (u32, u32) = (5, 14);
/// A private tmpfs gets one inode per this many bytes of its size: an inode and its dentry take
/// about 1 KiB of kernel memory the size does not count, so that stays under a quarter of it.
const TMP_BYTES_PER_INODE: u64 = 4 << 10;
/// The fewest inodes a private tmpfs gets, however small: a shell's here-documents and a few
/// tools' temp files.
const TMP_MIN_INODES: u64 = 1024;
/// Stack of the sandbox's init: it runs a few frames of raw system calls (its deepest, the
/// `clone` of the shell, uses a stack of its own), far less than this.
const INIT_STACK_BYTES: usize = 64 << 10;
/// Namespaces mode's plan, prepared before the forks: what the template's builder and each
/// command's init carry out (`Script`), and how to name a step of it that failed.
pub(in crate::exec) struct NsPlan {
    /// The template's namespaces: user, mount and (without network) network.
    template_flags: libc::c_int,
    /// What each action does (the template's, then the command's), for an error naming the step.
    pub(super) descriptions: Vec<String>,
    /// What the forked children carry out, and the template once built.
    script: Script,
}

fn newroot(path: &Path) -> io::Result<CString> {
    let mut bytes = b"/newroot".to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    c_path(Path::new(OsStr::from_bytes(&bytes)))
}

fn oldroot(path: &Path) -> io::Result<CString> {
    let mut bytes = b"/oldroot".to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    c_path(Path::new(OsStr::from_bytes(&bytes)))
}

struct Builder {
    actions: Vec<Action>,
    descriptions: Vec<String>,
    made: Vec<PathBuf>,
}

impl Builder {
    fn push(&mut self, action: Action, description: String) {
        self.actions.push(action);
        self.descriptions.push(description);
    }

    /// `mkdir -p` of `path` inside the new root.
    fn mkdirs(&mut self, path: &Path) -> io::Result<()> {
        let mut at = PathBuf::from("/");
        for part in path.components().skip(1) {
            at.push(part);
            if !self.made.contains(&at) {
                self.made.push(at.clone());
                self.push(
                    Action::Mkdir(newroot(&at)?),
                    format!("creating {}", at.display()),
                );
            }
        }
        Ok(())
    }

    /// Bind host `src` at `dst` inside.
    fn bind(&mut self, src: &Path, dst: &Path, read_only: bool) -> io::Result<()> {
        let meta = std::fs::metadata(src)?;
        let dir = meta.is_dir();
        match (dir, dst.parent()) {
            (true, _) => self.mkdirs(dst)?,
            (false, Some(parent)) => self.mkdirs(parent)?,
            (false, None) => {}
        }
        self.push(
            Action::Bind {
                src: oldroot(src)?,
                dst: newroot(dst)?,
                dir,
                read_only,
            },
            format!(
                "binding {} at {}{}",
                src.display(),
                dst.display(),
                if read_only { " read-only" } else { "" }
            ),
        );
        Ok(())
    }

    /// Bind the configured path `held` as `mount` says.
    fn verified(&mut self, held: &Held, mount: &Mount) -> io::Result<()> {
        if !mount.inside_bind {
            match (held.dir, mount.dst.parent()) {
                (true, _) => self.mkdirs(&mount.dst)?,
                (false, Some(parent)) => self.mkdirs(parent)?,
                (false, None) => {}
            }
        }
        self.push(
            Action::Verified {
                src: oldroot(&held.real)?,
                dev: held.dev,
                ino: held.ino,
                dst: newroot(&mount.dst)?,
                dir: held.dir,
                read_only: mount.read_only,
                dst_checked: mount.inside_bind,
            },
            format!(
                "binding {} at {}{}",
                held.real.display(),
                mount.dst.display(),
                if mount.read_only { " read-only" } else { "" }
            ),
        );
        Ok(())
    }

    /// Mask `path` (inside) with an empty file or directory of the setup tmpfs.
    fn mask(&mut self, path: &Path, dir: bool) -> io::Result<()> {
        let src = if dir { c"/emptydir" } else { c"/empty" };
        self.push(
            Action::Bind {
                src: src.to_owned(),
                dst: newroot(path)?,
                dir,
                read_only: true,
            },
            format!("masking {}", path.display()),
        );
        Ok(())
    }

    fn tmpfs(&mut self, dst: &Path, data: &str, flags: libc::c_ulong) -> io::Result<()> {
        self.mkdirs(dst)?;
        self.push(
            Action::Tmpfs {
                dst: newroot(dst)?,
                data: CString::new(data).expect("static"),
                flags,
            },
            format!("mounting a tmpfs at {}", dst.display()),
        );
        Ok(())
    }
}

impl NsPlan {
    pub(super) fn new(sandbox: &Sandbox, paths: &Resolved) -> io::Result<NsPlan> {
        let runtime_root = &sandbox.runtime_root;
        if !runtime_root.is_absolute() || runtime_root == Path::new("/") {
            return Err(invalid_spec(format!(
                "runtimeRoot must be an absolute directory other than /, got {}",
                runtime_root.display()
            )));
        }
        let mut b = Builder {
            actions: Vec::new(),
            descriptions: Vec::new(),
            made: Vec::new(),
        };
        for dir in SYSTEM_DIRS.iter().chain([&ETC]) {
            let path = Path::new(dir);
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(path)?;
                b.push(
                    Action::Symlink {
                        target: c_path(&target)?,
                        dst: newroot(path)?,
                    },
                    format!("linking {dir} to {}", target.display()),
                );
            } else if meta.is_dir() {
                b.bind(path, path, true)?;
            }
        }
        for (path, dir) in present_secrets() {
            b.mask(&path, dir)?;
        }
        if sandbox.network {
            // A resolv.conf linking out of /etc (systemd-resolved's stub) needs its target.
            if let Ok(target) = std::fs::canonicalize("/etc/resolv.conf") {
                if !target.starts_with("/etc") {
                    b.bind(&target, &target, true)?;
                }
            }
        }
        // A proc of the template's own PID namespace (only the builder, gone once built): the
        // kernel lets a user namespace mount a proc only while a full one is visible in its mount
        // namespace, so each command's proc goes on top of this one, which shows no process.
        b.mkdirs(Path::new("/proc"))?;
        b.push(
            Action::Proc(newroot(Path::new("/proc"))?),
            "mounting the template's /proc".into(),
        );
        let dev = Path::new(DEV);
        b.tmpfs(dev, "mode=0755", libc::MS_NOSUID | libc::MS_NOEXEC)?;
        for name in DEVICES {
            let host = dev.join(name);
            if host.exists() {
                b.bind(&host, &host, false)?;
            }
        }
        for (name, target) in DEV_LINKS {
            b.push(
                Action::Symlink {
                    target: CString::new(*target).expect("static"),
                    dst: newroot(&dev.join(name))?,
                },
                format!("linking /dev/{name}"),
            );
        }
        for tmpfs in PRIVATE_TMPFS {
            b.mkdirs(&Path::new(tmpfs).join(STAGING_NAME))?;
        }
        for (path, dir) in [(EMPTY_FILE, false), (EMPTY_DIR, true)] {
            b.push(
                Action::Empty {
                    path: newroot(Path::new(path))?,
                    dir,
                },
                format!("creating {path}"),
            );
        }
        // The workspace and the caller's binds last: one under /dev lands on that tmpfs instead
        // of being hidden by it. (One under /tmp would be hidden by each command's own /tmp.)
        let areas: Vec<(&Path, &Path, bool)> = paths
            .held
            .iter()
            .map(|h| match h.kind {
                Kind::Root => (h.real.as_path(), runtime_root.as_path(), false),
                kind => (
                    h.real.as_path(),
                    h.configured.as_path(),
                    kind == Kind::ReadOnly,
                ),
            })
            .collect();
        let mut binds = Vec::new();
        for mount in mounts(&areas) {
            let held = &paths.held[mount.source];
            b.verified(held, &mount)?;
            binds.push((mount.dst, held.dir));
        }
        b.push(
            Action::ReadOnly(newroot(dev)?),
            "making /dev read-only".into(),
        );
        b.push(
            Action::ReadOnly(c"/newroot".to_owned()),
            "making the new root read-only".into(),
        );
        let template_actions = std::mem::take(&mut b.actions);
        let tmp_size = sandbox.tmp_size.unwrap_or_else(super::default_tmp_size);
        if tmp_size == 0 {
            return Err(invalid_spec("tmpSize must be at least 1 byte".into()));
        }
        let (command_actions, command_descriptions) = command_actions(&binds, tmp_size)?;
        b.descriptions.extend(command_descriptions);

        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // The builder writes its own maps, which the kernel limits to one line mapping its own ids
        // (root included: CAP_SETUID would be needed in the parent namespace). Other owners
        // show as the overflow id (nobody) inside.
        let (uid_map, gid_map) = (format!("{uid} {uid} 1\n"), format!("{gid} {gid} 1\n"));
        // A PID namespace of its own for the template's /proc (see there).
        let mut template_flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        if !sandbox.network {
            template_flags |= libc::CLONE_NEWNET;
        }
        let clone_flags =
            libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
        let max = sandbox.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES);
        if max == 0 {
            return Err(invalid_spec("maxProcesses must be at least 1".into()));
        }
        let pid_max = max.saturating_add(RESERVED_PIDS);
        let nproc =
            (uid != 0 && kernel_at_least(NPROC_PER_USERNS)).then(|| libc::rlim_t::from(max));
        Ok(NsPlan {
            template_flags,
            descriptions: b.descriptions,
            script: Script {
                clone_flags,
                deny_setgroups: true,
                uid_map: CString::new(uid_map).expect("digits"),
                gid_map: CString::new(gid_map).expect("digits"),
                template_actions,
                command_actions,
                network: sandbox.network,
                proxy_listen: !sandbox.network && sandbox.network_allow.is_some(),
                pid_max: CString::new(pid_max.to_string()).expect("digits"),
                nproc,
                argv_area: stat_area(ARG_START_FIELD),
                env_area: stat_area(ENV_START_FIELD),
                init_stack: vec![0; INIT_STACK_BYTES],
                template: None,
            },
        })
    }

    /// The descriptors the supervisor must keep open to join the template (-1: none).
    pub(in crate::exec) fn kept_fds(&self) -> [RawFd; 3] {
        self.script.template_fds()
    }
}

/// The options of a command's private tmpfs of `size` bytes: its size, and as many inodes as one per
/// `TMP_BYTES_PER_INODE` of it (an inode takes kernel memory outside the size).
pub(super) fn tmpfs_options(size: u64) -> CString {
    let inodes = (size / TMP_BYTES_PER_INODE).max(TMP_MIN_INODES);
    CString::new(format!("mode=1777,size={size},nr_inodes={inodes}")).expect("digits")
}

/// Each command's part of the root, on the template's: a fresh `/proc` (over the template's), its
/// host-wide entries read-only or masked, then the private `/tmp` and `/dev/shm` with the template's `binds` (the
/// workspace's and the caller's, inside paths) under them moved onto them.
fn command_actions(
    binds: &[(PathBuf, bool)],
    tmp_size: u64,
) -> io::Result<(Vec<Action>, Vec<String>)> {
    let tmpfs_data = tmpfs_options(tmp_size);
    let mut actions = vec![Action::Proc(c"/proc".to_owned())];
    let mut descriptions = vec!["mounting /proc for the PID namespace".to_string()];
    for path in PROC_READ_ONLY {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        // Bound over itself: the sandbox's own /proc, not the host's.
        actions.push(Action::Bind {
            src: c_path(Path::new(path))?,
            dst: c_path(Path::new(path))?,
            dir: meta.is_dir(),
            read_only: true,
        });
        descriptions.push(format!("making {path} read-only"));
    }
    for path in PROC_MASKED {
        if let Ok(meta) = std::fs::metadata(path) {
            let src = if meta.is_dir() { EMPTY_DIR } else { EMPTY_FILE };
            actions.push(Action::Bind {
                src: c_path(Path::new(src))?,
                dst: c_path(Path::new(path))?,
                dir: meta.is_dir(),
                read_only: true,
            });
            descriptions.push(format!("masking {path}"));
        }
    }
    for tmpfs in PRIVATE_TMPFS {
        let tmpfs = Path::new(tmpfs);
        // A bind at the tmpfs's place (or above it) is what the caller asked to see there.
        if binds.iter().any(|(dst, _)| tmpfs.starts_with(dst)) {
            continue;
        }
        let staging = tmpfs.join(STAGING_NAME);
        actions.push(Action::Tmpfs {
            dst: c_path(&staging)?,
            data: tmpfs_data.clone(),
            flags: libc::MS_NOSUID | libc::MS_NODEV,
        });
        descriptions.push(format!("mounting a tmpfs at {}", tmpfs.display()));
        let mut made: Vec<PathBuf> = Vec::new();
        for (dst, dir) in binds {
            let Ok(relative) = dst.strip_prefix(tmpfs) else {
                continue;
            };
            // One under another bind moves with it.
            let nested = binds.iter().any(|(outer, _)| {
                outer != dst && outer.starts_with(tmpfs) && dst.starts_with(outer)
            });
            if nested || relative.as_os_str().is_empty() {
                continue;
            }
            let target = staging.join(relative);
            let mut at = staging.clone();
            for part in relative.parent().into_iter().flat_map(Path::components) {
                at.push(part);
                if !made.contains(&at) {
                    made.push(at.clone());
                    actions.push(Action::Mkdir(c_path(&at)?));
                    descriptions.push(format!("creating {}", at.display()));
                }
            }
            actions.push(Action::Move {
                src: c_path(dst)?,
                dst: c_path(&target)?,
                dir: *dir,
            });
            descriptions.push(format!(
                "moving the bind at {} onto the private tmpfs",
                dst.display()
            ));
        }
        actions.push(Action::Move {
            src: c_path(&staging)?,
            dst: c_path(tmpfs)?,
            dir: true,
        });
        descriptions.push(format!("moving the private tmpfs to {}", tmpfs.display()));
    }
    Ok((actions, descriptions))
}

/// `/proc/self/stat`'s arg_start and env_start fields (Linux 3.5), each followed by its end.
const ARG_START_FIELD: usize = 48;
const ENV_START_FIELD: usize = 50;

/// The memory range whose start is `/proc/self/stat`'s field `start_field` and end the next,
/// counted after the command name's closing parenthesis (the name may hold spaces).
fn stat_area(start_field: usize) -> Option<(usize, usize)> {
    /// Fields 1 (pid) and 2 (comm) come before the closing parenthesis; fields count from 1.
    const FIELDS_BEFORE_REST: usize = 3;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut fields = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .skip(start_field - FIELDS_BEFORE_REST);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

/// Whether the running kernel's release is at least `(major, minor)`.
fn kernel_at_least((major, minor): (u32, u32)) -> bool {
    // SAFETY: uname fills the struct it is given; the kernel NUL-terminates the release.
    let release = unsafe {
        let mut name: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut name) != 0 {
            return false;
        }
        std::ffi::CStr::from_ptr(name.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    };
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

impl NsPlan {
    /// Builds the template (a fork of this process carries out `template_actions` in new user,
    /// mount and network namespaces) and keeps descriptors of its namespaces. `Err(code)`: the
    /// encoded failed step, or an I/O error of ours.
    /// Returns the proxy's listening sockets inside the template's network namespace, when the
    /// plan asked for them (`Script::proxy_listen`): IPv4 first, then IPv6 if the kernel has it.
    pub(super) fn build_template(&mut self) -> Result<Vec<OwnedFd>, TemplateError> {
        let (ready_read, ready_write) = cloexec_pipe()?;
        let (release_read, release_write) = cloexec_pipe()?;
        let proxy = if self.script.proxy_listen {
            Some(cloexec_socketpair()?)
        } else {
            None
        };
        let proxy_child = proxy.as_ref().map_or(-1, |(_, child)| child.as_raw_fd());
        // SAFETY: a fork (raw `clone` for the namespace flags): the child only runs `builder`,
        // which never returns and sticks to raw system calls on memory prepared before.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (self.template_flags | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        } as libc::pid_t;
        if pid < 0 {
            return Err(TemplateError::Step(step_error(
                Step::Clone,
                io::Error::last_os_error().raw_os_error().unwrap_or(0),
            )));
        }
        if pid == 0 {
            // SAFETY: we are the child of the clone above: single-threaded, in the new namespaces,
            // with our own copies of every descriptor (so closing all but our two ends touches
            // nothing of Node's), as `close_all_except` and `init::builder` require.
            unsafe {
                // Only our two ends: a copy of `release`'s write end, or of another thread's pipes
                // (a concurrent build or exec), would keep an end-of-file from coming, ours or
                // theirs, for as long as we wait.
                let (ready, release) = (ready_write.as_raw_fd(), release_read.as_raw_fd());
                let mut keep = [ready, release, proxy_child];
                keep.sort_unstable();
                close_all_except(&keep);
                init::builder(&self.script, ready, release, proxy_child)
            }
        }
        drop((ready_write, release_read));
        let proxy = proxy.map(|(node, child)| {
            drop(child);
            node
        });
        let mut message = [0u8; size_of::<i32>()];
        let result = match read_full(ready_read.as_fd(), &mut message) {
            Ok(n) if n == message.len() => match i32::from_ne_bytes(message) {
                0 => self
                    .open_template(pid)
                    .and_then(|()| match &proxy {
                        Some(channel) => receive_listeners(channel),
                        None => Ok(Vec::new()),
                    })
                    .map_err(TemplateError::Io),
                code => Err(TemplateError::Step(code)),
            },
            _ => Err(TemplateError::Io(io::Error::other(
                "the sandbox's template builder died",
            ))),
        };
        // Releases the builder: the namespaces live on in our descriptors.
        drop(release_write);
        let mut status = 0;
        // SAFETY: reaps our own child.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
        result
    }

    fn open_template(&mut self, pid: libc::pid_t) -> io::Result<()> {
        let open = |name: &str| -> io::Result<OwnedFd> {
            Ok(std::fs::File::open(format!("/proc/{pid}/ns/{name}"))?.into())
        };
        self.script.template = Some(Template {
            user: open("user")?,
            mnt: open("mnt")?,
            net: if self.script.network {
                None
            } else {
                Some(open("net")?)
            },
        });
        Ok(())
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

/// A Unix stream socket pair whose ends close on exec: (Node's, the builder's).
fn cloexec_socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The listening sockets the builder sent (`init::send_listeners`), sent before it reported ready.
fn receive_listeners(channel: &OwnedFd) -> io::Result<Vec<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; init::LISTENER_CMSG_WORDS];
    // SAFETY: `msghdr` is plain data; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `msg` describes valid buffers; received descriptors get close-on-exec.
    let n = unsafe {
        libc::recvmsg(
            channel.as_raw_fd(),
            &mut msg,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
        )
    };
    if n != 1 {
        return Err(io::Error::other(
            "the sandbox's template sent no proxy listener",
        ));
    }
    let mut fds = Vec::new();
    // SAFETY: walks the control messages the kernel wrote into `control` (`msg` says how many
    // bytes); each SCM_RIGHTS payload is an array of descriptors now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count =
                    ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if fds.is_empty() {
        return Err(io::Error::other(
            "the sandbox's template sent no proxy listener",
        ));
    }
    Ok(fds)
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Joins the template and creates the init of the command's own namespaces: `init::start`.
///
/// # Safety
///
/// As `init::start`: only in the supervisor (a forked, single-threaded child), with `start`
/// alive for as long as the supervisor runs.
pub(in crate::exec) unsafe fn start(plan: &NsPlan, start: &ShellStart) -> libc::pid_t {
    // SAFETY: the caller keeps `init::start`'s contract (stated above).
    unsafe { init::start(&plan.script, start) }
}
