//! Namespaces mode: the plan of the sandbox's filesystem, built here in Node (`script`: plain
//! data), and the helper's processes that carry it out (`init`): the template's builder, which
//! makes its fixed part once, and each command's init, which adds the command's own part.
//!
//! The **template** is a user namespace, a mount namespace holding the finished root (system
//! directories read-only, secrets masked, `/dev`, the workspace and the caller's binds, the whole
//! root read-only) and, without network, a network namespace with its loopback up. A short-lived
//! sandbox helper (a freshly executed image, nothing of Node's) builds it on the first exec of a
//! `Prepared` sandbox and sends Node descriptors of the three namespaces (they live as long as a
//! descriptor or a process holds them: nothing is left when Node exits, however it exits).
//!
//! **Each command**: the helper's supervisor joins the template's namespaces (`setns`) and clones the init
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
use super::setup::{c_path, invalid_spec};
use super::{Sandbox, DEFAULT_MAX_PROCESSES};
use crate::exec::child::{Action, CommandScript, TemplateScript};

pub(in crate::exec) mod init;

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
/// Namespaces mode's plan, prepared in Node: what the template's builder and each command's init
/// carry out (plain data the helper is handed), how to name a step of it that failed, and the
/// template once built.
pub(in crate::exec) struct NsPlan {
    /// What each action does (the template's, then the command's), for an error naming the step.
    pub(super) descriptions: Vec<String>,
    pub(in crate::exec) template_script: TemplateScript,
    /// Each command's part (its `template_fds` are -1: the helper's own numbers are set when
    /// they are handed over).
    pub(in crate::exec) command_script: CommandScript,
    /// The template, once built.
    template: Option<Template>,
}

/// Descriptors of the template's namespaces: holding them keeps the namespaces alive.
struct Template {
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
        let first_action = template_actions.len();
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
        let nproc = (uid != 0 && kernel_at_least(NPROC_PER_USERNS)).then(|| u64::from(max));
        Ok(NsPlan {
            descriptions: b.descriptions,
            template_script: TemplateScript {
                flags: template_flags,
                deny_setgroups: true,
                uid_map: CString::new(uid_map).expect("digits"),
                gid_map: CString::new(gid_map).expect("digits"),
                actions: template_actions,
                network: sandbox.network,
                proxy_listen: !sandbox.network && sandbox.network_allow.is_some(),
            },
            command_script: CommandScript {
                clone_flags,
                actions: command_actions,
                first_action: u32::try_from(first_action)
                    .map_err(|_| invalid_spec("too many mounts".into()))?,
                pid_max: CString::new(pid_max.to_string()).expect("digits"),
                nproc,
                template_fds: [-1; 3],
            },
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
    /// Builds the template: a sandbox helper carries out `template_script` in new user, mount,
    /// PID and (without network) network namespaces and sends descriptors of them, which this
    /// plan keeps. `Err(code)`: the encoded failed step, or an I/O error of ours.
    /// Returns the proxy's listening sockets inside the template's network namespace, when the
    /// plan asked for them (`proxy_listen`): IPv4 first, then IPv6 if the kernel has it.
    pub(super) fn build_template(&mut self) -> Result<Vec<OwnedFd>, TemplateError> {
        let (node, child_end) = seqpacket_pair()?;
        use crate::exec::{child, launch};
        let plan = child::encode_template(&self.template_script);
        let pid = launch::launch(child::Role::Template, &plan, &[child_end.as_fd()])?;
        drop(child_end);
        let report = receive_report(&node);
        launch::wait(pid);
        let (code, mut fds) = report.map_err(TemplateError::Io)?;
        if code != 0 {
            return Err(TemplateError::Step(code));
        }
        let namespaces = if self.template_script.network { 2 } else { 3 };
        if fds.len() < namespaces
            || (self.template_script.proxy_listen == (fds.len() == namespaces))
        {
            return Err(TemplateError::Io(io::Error::other(
                "the sandbox's template builder sent the wrong descriptors",
            )));
        }
        let listeners = fds.split_off(namespaces);
        let mut fds = fds.into_iter();
        let (Some(user), Some(mnt)) = (fds.next(), fds.next()) else {
            unreachable!("counted above")
        };
        self.template = Some(Template {
            user,
            mnt,
            net: fds.next(),
        });
        Ok(listeners)
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

/// A Unix seqpacket socket pair whose ends close on exec: (Node's, the helper's).
fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: a valid two-element buffer.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
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

/// The builder's report (`init::send_report`): its code and the descriptors it sent. End-of-file
/// (the builder died without reporting) is an error.
fn receive_report(channel: &OwnedFd) -> io::Result<(i32, Vec<OwnedFd>)> {
    let mut code = [0u8; size_of::<i32>()];
    let died = || io::Error::other("the sandbox's template builder died");
    let report = crate::sys::recv_fds(channel.as_fd(), &mut code).map_err(|_| died())?;
    if report.len != code.len() || report.truncated {
        return Err(died());
    }
    Ok((i32::from_ne_bytes(code), report.fds))
}
