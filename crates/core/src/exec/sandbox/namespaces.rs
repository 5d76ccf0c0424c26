//! Namespaces mode: the plan of the sandbox's filesystem (built before the fork), the template that
//! carries out its fixed part once, and the init that adds each command's own part (both run in
//! forked children: raw system calls only).
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
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::paths::{mounts, open_no_symlinks, Held, Kind, Mount, Resolved};
use super::plan::{c_path, invalid_spec, step_error, Step};
use super::{Sandbox, DEFAULT_MAX_PROCESSES};
use crate::exec::supervisor::{close_all_except, errno, set_errno, start_shell, ShellStart};
use crate::sys::read_full;

/// Where the setup tmpfs is mounted before the first `pivot_root`: a directory every Linux system
/// has. Once pivoted, the host's root (and its `/tmp`) is reached again under `/oldroot`.
const SETUP_BASE: &std::ffi::CStr = c"/tmp";
/// An empty file and directory (mode 000) in the template's `/tmp`, sources of each command's
/// masks of `/proc` entries; the command's own tmpfs on `/tmp` then hides them.
const EMPTY_FILE: &str = "/tmp/.pi-sandbox-empty";
const EMPTY_DIR: &str = "/tmp/.pi-sandbox-emptydir";
/// Each command's private tmpfs mounts, and where each is mounted first (a directory of the
/// template), so that binds the template holds under it can be moved onto it before it takes
/// its place.
const PRIVATE_TMPFS: &[&str] = &["/tmp", "/dev/shm"];
const STAGING_NAME: &str = ".pi-sandbox-next";
/// Host directories bound read-only at the same path (or recreated as the same symlink).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc",
];
/// Files and directories under `/etc` that hold secrets: masked by an empty file or directory.
pub(super) const SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/credstore",
    "/etc/credstore.encrypted",
];
/// Directories whose entries ending in `_key` are private keys (sshd's host keys).
pub(super) const KEY_DIRS: &[&str] = &["/etc/ssh"];
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
/// Device nodes bound from the host's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
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
/// `mount_setattr`'s `struct mount_attr` and flags (Linux 5.12).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const AT_EMPTY_PATH: libc::c_uint = 0x1000;
/// `open_tree`'s and `move_mount`'s flags (Linux 5.2).
const OPEN_TREE_CLONE: libc::c_uint = 1;
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

/// One step of building a root: the template's on paths under `/oldroot` (the host) and
/// `/newroot`, a command's on its final paths.
#[derive(Debug)]
pub(super) enum Action {
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

/// Everything the template's builder and each command's init need, prepared before the forks.
pub(in crate::exec) struct NsPlan {
    /// The template's namespaces: user, mount and (without network) network.
    template_flags: libc::c_int,
    /// Each command's own namespaces, inside the template's user namespace.
    clone_flags: libc::c_int,
    deny_setgroups: bool,
    uid_map: CString,
    gid_map: CString,
    /// The template's root, built once.
    pub(super) template_actions: Vec<Action>,
    /// Each command's additions, on the template's finished root.
    pub(super) command_actions: Vec<Action>,
    /// What each action does (the template's, then the command's), for an error naming the step.
    pub(super) descriptions: Vec<String>,
    network: bool,
    /// The new PID namespace's `pid_max` (Linux 6.14 namespaces it): a bound for every caller.
    pid_max: CString,
    /// RLIMIT_NPROC inside (the exact limit), when the kernel counts it per user namespace and
    /// the caller is not root (the kernel exempts root).
    nproc: Option<libc::rlim_t>,
    /// Where this process's command line and initial environment lie in memory (`/proc/self/stat`'s
    /// arg_start, arg_end, env_start, env_end): the init, a copy of Node, blanks them, so the
    /// sandbox's `/proc/1/cmdline` shows none of pi's (and its environ holds no key even if the
    /// kernel's ptrace check, which guards it today, were passed).
    argv_area: Option<(usize, usize)>,
    env_area: Option<(usize, usize)>,
    /// The stack the init runs on (it shares the supervisor's memory).
    init_stack: Vec<u8>,
    /// The template, once built (`build_template`).
    template: Option<Template>,
}

/// Descriptors of the template's namespaces: holding them keeps the namespaces alive.
pub(super) struct Template {
    user: OwnedFd,
    mnt: OwnedFd,
    net: Option<OwnedFd>,
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

/// Secret paths under `/etc` present on this host: (path, is a directory).
pub(super) fn present_secrets() -> Vec<(PathBuf, bool)> {
    let mut found: Vec<(PathBuf, bool)> = SECRETS
        .iter()
        .filter_map(|path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            // A symlink is masked through its target only if that is under /etc too; masking
            // the link itself is not possible (a mount follows it).
            (!meta.file_type().is_symlink()).then(|| (PathBuf::from(path), meta.is_dir()))
        })
        .collect();
    for dir in KEY_DIRS {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let is_key = entry.file_name().as_bytes().ends_with(b"_key");
            if is_key && entry.file_type().is_ok_and(|t| t.is_file()) {
                found.push((entry.path(), false));
            }
        }
    }
    found
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
        for dir in SYSTEM_DIRS {
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
        let dev = Path::new("/dev");
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
            clone_flags,
            deny_setgroups: true,
            uid_map: CString::new(uid_map).expect("digits"),
            gid_map: CString::new(gid_map).expect("digits"),
            template_actions,
            command_actions,
            descriptions: b.descriptions,
            network: sandbox.network,
            pid_max: CString::new(pid_max.to_string()).expect("digits"),
            nproc,
            argv_area: stat_area(ARG_START_FIELD),
            env_area: stat_area(ENV_START_FIELD),
            init_stack: vec![0; INIT_STACK_BYTES],
            template: None,
        })
    }

    /// The descriptors the supervisor must keep open to join the template (-1: none).
    pub(in crate::exec) fn kept_fds(&self) -> [RawFd; 3] {
        match &self.template {
            Some(t) => [
                t.user.as_raw_fd(),
                t.mnt.as_raw_fd(),
                t.net.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            ],
            None => [-1; 3],
        }
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

/// Writes `data` to the file at `path`; async-signal-safe.
unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
    libc::close(fd);
    ok
}

impl NsPlan {
    /// Builds the template (a fork of this process carries out `template_actions` in new user,
    /// mount and network namespaces) and keeps descriptors of its namespaces. `Err(code)`: the
    /// encoded failed step, or an I/O error of ours.
    pub(super) fn build_template(&mut self) -> Result<(), TemplateError> {
        let (ready_read, ready_write) = cloexec_pipe()?;
        let (release_read, release_write) = cloexec_pipe()?;
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
            // SAFETY: see above.
            unsafe {
                // Only our two ends: a copy of `release`'s write end, or of another thread's pipes
                // (a concurrent build or exec), would keep an end-of-file from coming, ours or
                // theirs, for as long as we wait.
                let (ready, release) = (ready_write.as_raw_fd(), release_read.as_raw_fd());
                close_all_except(&[ready.min(release), ready.max(release)]);
                builder(self, ready, release)
            }
        }
        drop((ready_write, release_read));
        let mut message = [0u8; size_of::<i32>()];
        let result = match read_full(ready_read.as_fd(), &mut message) {
            Ok(n) if n == message.len() => match i32::from_ne_bytes(message) {
                0 => self.open_template(pid).map_err(TemplateError::Io),
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
        self.template = Some(Template {
            user: open("user")?,
            mnt: open("mnt")?,
            net: if self.network {
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

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The template's builder (a fork of Node in the template's new namespaces): writes its id maps,
/// builds the root and pivots into it, brings the loopback up, reports 0 (or the failed step) on
/// `ready`, and waits for Node to have opened its namespaces (end-of-file on `release`).
unsafe fn builder(plan: &NsPlan, ready: RawFd, release: RawFd) -> ! {
    // Node's handlers would run in this copy of Node.
    crate::exec::supervisor::reset_signals();
    // Only while Node waits for us; a dead Node also closes `release`.
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    let fail = |step: Step| -> ! {
        let code = step_error(step, errno()).to_ne_bytes();
        libc::write(ready, code.as_ptr().cast(), code.len());
        libc::_exit(super::plan::EXIT_SETUP_FAILED)
    };
    if plan.deny_setgroups && !write_file(c"/proc/self/setgroups", b"deny") {
        fail(Step::Setgroups);
    }
    if !write_file(c"/proc/self/uid_map", plan.uid_map.as_bytes()) {
        fail(Step::UidMap);
    }
    if !write_file(c"/proc/self/gid_map", plan.gid_map.as_bytes()) {
        fail(Step::GidMap);
    }
    let null = std::ptr::null::<libc::c_char>();
    if libc::mount(
        null,
        c"/".as_ptr(),
        null,
        libc::MS_REC | libc::MS_PRIVATE,
        null.cast(),
    ) != 0
    {
        fail(Step::Private);
    }
    if libc::mount(
        c"tmpfs".as_ptr(),
        SETUP_BASE.as_ptr(),
        c"tmpfs".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV,
        c"mode=0755".as_ptr().cast(),
    ) != 0
    {
        fail(Step::SetupTmpfs);
    }
    if libc::chdir(SETUP_BASE.as_ptr()) != 0
        || libc::mkdir(c"newroot".as_ptr(), 0o755) != 0
        || libc::mkdir(c"oldroot".as_ptr(), 0o755) != 0
        || libc::mkdir(c"emptydir".as_ptr(), 0o000) != 0
    {
        fail(Step::SetupTmpfs);
    }
    let empty = libc::open(
        c"empty".as_ptr(),
        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
        0o000,
    );
    if empty < 0 {
        fail(Step::SetupTmpfs);
    }
    libc::close(empty);
    if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c"oldroot".as_ptr()) != 0
        || libc::chdir(c"/".as_ptr()) != 0
    {
        fail(Step::PivotSetup);
    }
    if libc::mount(
        c"tmpfs".as_ptr(),
        c"/newroot".as_ptr(),
        c"tmpfs".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV,
        c"mode=0755".as_ptr().cast(),
    ) != 0
    {
        fail(Step::NewRoot);
    }
    for (index, action) in plan.template_actions.iter().enumerate() {
        if !perform(action) {
            fail(Step::Action(index));
        }
    }
    if libc::chdir(c"/newroot".as_ptr()) != 0
        || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
    {
        fail(Step::PivotNew);
    }
    // The host's root now lies over ours at "/": detach it (and everything under it).
    if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
        fail(Step::DetachHost);
    }
    if !plan.network {
        loopback_up();
    }
    let done = 0i32.to_ne_bytes();
    libc::write(ready, done.as_ptr().cast(), done.len());
    let mut byte = [0u8; 1];
    while libc::read(release, byte.as_mut_ptr().cast(), 1) != 0 {
        if errno() != libc::EINTR {
            break;
        }
    }
    libc::_exit(0)
}

/// Joins the template and creates the init of the command's own namespaces; returns its pid (in
/// our namespace) or -1 with errno holding the encoded failed step. Runs in the supervisor, which
/// stays in the template's namespaces (it only waits and kills from there on).
///
/// The init shares the supervisor's memory (`CLONE_VM`) on a stack of its own: the supervisor is
/// a copy of Node, and a second copy of Node's page tables (a plain fork) cost more than all the
/// namespaces and mounts together. The two processes never write the same memory but `errno`,
/// which each reads only right after a call of its own failed, while the other is blocked: the
/// supervisor in its read of the exec-error pipe until the shell has exec'd or the init failed,
/// the init (after that) in `waitpid`, which cannot fail while the shell lives.
pub(in crate::exec) unsafe fn start(plan: &NsPlan, start: &ShellStart) -> libc::pid_t {
    /// The ABI's stack alignment at a call (x86-64 and AArch64: 16 bytes).
    const STACK_ALIGN: usize = 16;
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the supervisor's `ShellStart`, alive while the supervisor runs (it
        // never returns from `supervise`); the plan it points to was built before the fork.
        unsafe {
            let start = &*(arg as *const ShellStart);
            match start.prepared.sandbox.as_ref().and_then(|p| p.namespaces()) {
                Some(plan) => init(plan, start),
                None => libc::_exit(super::plan::EXIT_SETUP_FAILED),
            }
        }
    }
    let [user, mnt, net] = plan.kept_fds();
    // The user namespace first: it gives the capabilities the other two need.
    let joined = user >= 0
        && libc::setns(user, libc::CLONE_NEWUSER) == 0
        && libc::setns(mnt, libc::CLONE_NEWNS) == 0
        && (net < 0 || libc::setns(net, libc::CLONE_NEWNET) == 0);
    if !joined {
        let code = if user < 0 { libc::EINVAL } else { errno() };
        set_errno(step_error(Step::JoinTemplate, code));
        return -1;
    }
    for fd in [user, mnt, net] {
        if fd >= 0 {
            libc::close(fd);
        }
    }
    let stack = plan.init_stack.as_ptr() as usize + plan.init_stack.len();
    let stack_top = (stack & !(STACK_ALIGN - 1)) as *mut libc::c_void;
    let pid = libc::clone(
        entry,
        stack_top,
        plan.clone_flags | libc::CLONE_VM | libc::SIGCHLD,
        start as *const ShellStart as *mut libc::c_void,
    );
    if pid < 0 {
        set_errno(step_error(Step::Clone, errno()));
        return -1;
    }
    pid
}

unsafe fn fail(start: &ShellStart, step: Step) -> ! {
    let code = step_error(step, errno()).to_ne_bytes();
    libc::write(start.exec_error, code.as_ptr().cast(), code.len());
    libc::_exit(super::plan::EXIT_SETUP_FAILED)
}

/// PID 1 of the sandbox: adds the command's part of the root, starts the shell, and exits with its
/// status.
unsafe fn init(plan: &NsPlan, start: &ShellStart) -> ! {
    crate::exec::supervisor::reset_signals();
    libc::setsid(); // its own group: the supervisor's kill(-pid) reaches it
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    // The supervisor died before the line above: nobody reads the error pipe any more.
    let mut alive = libc::pollfd {
        fd: start.exec_error,
        events: libc::POLLOUT,
        revents: 0,
    };
    if libc::poll(&mut alive, 1, 0) < 0 || alive.revents & libc::POLLERR != 0 {
        libc::_exit(super::plan::EXIT_SETUP_FAILED);
    }
    let first = plan.template_actions.len();
    for (index, action) in plan.command_actions.iter().enumerate() {
        if !perform(action) {
            fail(start, Step::Action(first + index));
        }
        // The process bound: pid_max of our PID namespace where the kernel namespaces it
        // (6.14), written before /proc/sys turns read-only. Older kernels refuse the write:
        // then only RLIMIT_NPROC (not for root) limits.
        if matches!(action, Action::Proc(_)) {
            write_file(c"/proc/sys/kernel/pid_max", plan.pid_max.as_bytes());
        }
    }
    if let Some(max) = plan.nproc {
        let limit = libc::rlimit {
            rlim_cur: max,
            rlim_max: max,
        };
        libc::setrlimit(libc::RLIMIT_NPROC, &limit);
    }
    if let Some((start, end)) = plan.env_area {
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
    }
    if let Some((start, end)) = plan.argv_area {
        // Our own copy of Node's memory (the supervisor's, shared): pi's command line stays pi's.
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
        let name = b"pi-sandbox-init";
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            start as *mut u8,
            name.len().min(end - start - 1),
        );
    }
    libc::prctl(libc::PR_SET_NAME, c"pi-sandbox-init".as_ptr(), 0, 0, 0);
    let shell_start = ShellStart {
        supervisor: libc::getpid(),
        ..*start
    };
    let shell = start_shell(&shell_start);
    if shell < 0 {
        fail(start, Step::StartShell);
    }
    // The shell has exec'd (or reported its failure): let the supervisor's read end.
    libc::close(start.exec_error);
    libc::close(start.output);
    loop {
        let mut status = 0;
        let pid = libc::waitpid(-1, &mut status, 0);
        if pid == shell {
            // The shell's code, `128 + signal` for a signal: what the supervisor would report.
            let code = if libc::WIFSIGNALED(status) {
                crate::exec::SIGNAL_EXIT_BASE + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            };
            libc::_exit(code);
        }
        if pid < 0 && errno() != libc::EINTR {
            libc::_exit(super::plan::EXIT_SETUP_FAILED);
        }
    }
}

unsafe fn perform(action: &Action) -> bool {
    let null = std::ptr::null::<libc::c_char>();
    match action {
        Action::Mkdir(path) => libc::mkdir(path.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST,
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
            made && libc::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_MOVE, null.cast()) == 0
        }
    }
}

/// `Action::Verified`: the bind of a configured path, only of the inode `id` (device, inode) found
/// at `src` without following symlinks, through a detached copy of its mount tree (`open_tree`,
/// Linux 5.2) made read-only before it is attached, so no path is looked up twice. Before 5.2,
/// `mount` binds the descriptors through `/proc/self/fd`.
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
    let mut st: libc::stat = std::mem::zeroed();
    if libc::fstat(source, &mut st) != 0 || (st.st_dev, st.st_ino) != id {
        libc::close(source);
        set_errno(libc::ESTALE);
        return false;
    }
    let target = if dst_checked {
        open_no_symlinks(dst)
    } else {
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
    };
    let bound = target >= 0 && attach(source, target, dst, read_only);
    let failed = errno();
    libc::close(source);
    if target >= 0 {
        libc::close(target);
    }
    set_errno(failed);
    bound
}

/// Binds what `source` is open on at what `target` is open on (`dst` names it), read-only if asked.
unsafe fn attach(source: RawFd, target: RawFd, dst: &CString, read_only: bool) -> bool {
    let tree = libc::syscall(
        libc::SYS_open_tree,
        source,
        c"".as_ptr(),
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_EMPTY_PATH | AT_RECURSIVE,
    ) as libc::c_int;
    if tree < 0 {
        return errno() == libc::ENOSYS && attach_by_fd_paths(source, target, dst, read_only);
    }
    let mut set = true;
    if read_only {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        set = libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            AT_EMPTY_PATH | AT_RECURSIVE,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        ) == 0;
        // Before 5.12: the bind itself, once attached.
        if !set && errno() != libc::ENOSYS {
            let failed = errno();
            libc::close(tree);
            set_errno(failed);
            return false;
        }
    }
    let moved = libc::syscall(
        libc::SYS_move_mount,
        tree,
        c"".as_ptr(),
        target,
        c"".as_ptr(),
        MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
    ) == 0;
    let failed = errno();
    libc::close(tree);
    set_errno(failed);
    moved && (set || remount_attached(dst))
}

/// `attach` before Linux 5.2: `mount` of the host's `/proc/self/fd` names of the two descriptors
/// (both opened in this mount namespace, as a bind requires).
unsafe fn attach_by_fd_paths(source: RawFd, target: RawFd, dst: &CString, read_only: bool) -> bool {
    let (mut from, mut to) = ([0u8; FD_PATH_BYTES], [0u8; FD_PATH_BYTES]);
    let null = std::ptr::null::<libc::c_char>();
    libc::mount(
        fd_path(source, &mut from),
        fd_path(target, &mut to),
        null,
        libc::MS_BIND | libc::MS_REC,
        null.cast(),
    ) == 0
        && (!read_only || remount_attached(dst))
}

/// Makes the bind just attached at `dst` read-only: the mount found there again without following
/// symlinks, remounted through its `/proc/self/fd` name.
unsafe fn remount_attached(dst: &CString) -> bool {
    let fd = open_no_symlinks(dst);
    if fd < 0 {
        return false;
    }
    let mut name = [0u8; FD_PATH_BYTES];
    let path = std::ffi::CStr::from_ptr(fd_path(fd, &mut name));
    let done = make_read_only(path);
    let failed = errno();
    libc::close(fd);
    set_errno(failed);
    done
}

/// `/oldroot/proc/self/fd/` and the digits of a descriptor, and its NUL.
const FD_PATH_BYTES: usize = 48;

/// `/oldroot/proc/self/fd/<fd>` in `buf` (the host's proc, which shows this process too): a path
/// naming the file `fd` is open on. No allocation.
unsafe fn fd_path(fd: RawFd, buf: &mut [u8; FD_PATH_BYTES]) -> *const libc::c_char {
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
unsafe fn make_read_only(dst: &std::ffi::CStr) -> bool {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let r = libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        dst.as_ptr(),
        AT_RECURSIVE,
        &attr as *const MountAttr,
        size_of::<MountAttr>(),
    );
    r == 0 || (errno() == libc::ENOSYS && remount_read_only(dst))
}

/// Remounts the bind at `dst` read-only, keeping the flags it has (a locked one cannot be cleared).
unsafe fn remount_read_only(dst: &std::ffi::CStr) -> bool {
    let mut fs: libc::statvfs = std::mem::zeroed();
    let kept = if libc::statvfs(dst.as_ptr(), &mut fs) == 0 {
        fs.f_flag as libc::c_ulong & KEPT_MOUNT_FLAGS
    } else {
        0
    };
    let null = std::ptr::null::<libc::c_char>();
    libc::mount(
        null,
        dst.as_ptr(),
        null,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | kept,
        null.cast(),
    ) == 0
}

/// Brings the new network namespace's loopback up, so servers the shell starts on localhost work.
/// A failure only costs that.
unsafe fn loopback_up() {
    /// `struct ifreq` as `SIOCSIFFLAGS` reads it: the name, then the flags in the union (40 bytes).
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        return;
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &mut req as *mut IfReq);
    libc::close(fd);
}
