//! The sandbox's configured paths (`root`, `read_only`, `read_write`), resolved once, to
//! descriptors, when the sandbox is made (`Prepared`). A command that can write where one of them
//! lives could otherwise swap it for a symlink and redirect whatever is built from it later: every
//! command's Landlock rules take the held descriptors, the namespaces template binds only what it
//! finds again, without following symlinks, to be the same inode, and every command first checks
//! that each path still names what it named (`Resolved::check`), refusing it otherwise.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::{Mode, Sandbox};
use crate::error::Error;

/// Symlinks followed while looking for a planted one in a configured path: the kernel's own bound
/// (`MAXSYMLINKS`); past it the kernel refused the path already.
const MAX_SYMLINKS: usize = 40;

/// What a configured path is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Root,
    ReadOnly,
    ReadWrite,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Root => "the root",
            Kind::ReadOnly => "the readOnly path",
            Kind::ReadWrite => "the readWrite path",
        }
    }
}

/// One configured path, resolved.
pub(super) struct Held {
    pub(super) kind: Kind,
    /// As configured (absolute): where a bind appears inside.
    pub(super) configured: PathBuf,
    /// What it resolved to (no symlink left).
    pub(super) real: PathBuf,
    c_real: CString,
    /// An `O_PATH` descriptor of it.
    pub(super) fd: OwnedFd,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) dir: bool,
}

/// Every configured path of a sandbox, resolved; the root first.
pub(in crate::exec) struct Resolved {
    pub(super) held: Vec<Held>,
}

fn refuse(why: String) -> Error {
    Error::sandbox_unavailable(why)
}

impl Resolved {
    /// Resolves `sandbox`'s paths; `mode` (the one a command will use, when known) decides which
    /// nestings can be enforced.
    pub(super) fn open(sandbox: &Sandbox, mode: Option<Mode>) -> Result<Resolved, Error> {
        if !sandbox.root.is_absolute() {
            return Err(refuse(format!(
                "the root must be an absolute path, got {}",
                sandbox.root.display()
            )));
        }
        let mut held = vec![hold(Kind::Root, &sandbox.root)?];
        if !held[0].dir {
            return Err(refuse(format!(
                "the root {} is not a directory",
                held[0].real.display()
            )));
        }
        for (kind, paths) in [
            (Kind::ReadOnly, &sandbox.read_only),
            (Kind::ReadWrite, &sandbox.read_write),
        ] {
            for path in paths {
                if !path.is_absolute() {
                    return Err(refuse(format!(
                        "bind paths must be absolute, got {}",
                        path.display()
                    )));
                }
                held.push(hold(kind, path)?);
            }
        }
        let writable: Vec<PathBuf> = held
            .iter()
            .filter(|h| h.kind != Kind::ReadOnly)
            .map(|h| h.real.clone())
            .collect();
        for h in &held {
            if let Some(link) = planted_link(&h.configured, &writable) {
                return Err(refuse(format!(
                    "{} {} resolves through the symlink {}, which lies where the sandbox's \
                     commands can write (one of them may have planted it): configure the path it \
                     leads to ({}) instead",
                    h.kind.name(),
                    h.configured.display(),
                    link.display(),
                    h.real.display()
                )));
            }
        }
        let areas: Vec<(Kind, &Path)> = held.iter().map(|h| (h.kind, h.real.as_path())).collect();
        conflicts(&areas, mode).map_err(refuse)?;
        Ok(Resolved { held })
    }

    pub(super) fn root(&self) -> &Held {
        &self.held[0]
    }

    /// Before each command: every path still names the file it named when the sandbox was made.
    pub(super) fn check(&self) -> Result<(), Error> {
        for h in &self.held {
            // SAFETY: a NUL-terminated path and a stat buffer of ours.
            let same = unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                libc::stat(h.c_real.as_ptr(), &mut st) == 0
                    && st.st_dev == h.dev
                    && st.st_ino == h.ino
            };
            if !same {
                return Err(refuse(format!(
                    "{} {} is no longer the {} the sandbox was made with (removed, replaced, \
                     moved or swapped for a symlink): refusing to follow it; make a new sandbox \
                     (createBashOperations) to use what is there now",
                    h.kind.name(),
                    h.configured.display(),
                    if h.dir { "directory" } else { "file" }
                )));
            }
        }
        Ok(())
    }
}

/// Opens `path` (following symlinks, once) and notes what it is.
fn hold(kind: Kind, path: &Path) -> Result<Held, Error> {
    let what = match kind {
        Kind::Root => "open the root",
        _ => "bind",
    };
    let cannot = |e: std::io::Error| refuse(format!("cannot {what} {}: {e}", path.display()));
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| refuse(format!("{} contains a NUL byte", path.display())))?;
    // SAFETY: opens a NUL-terminated path of ours.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(cannot(std::io::Error::last_os_error()));
    }
    // SAFETY: just opened, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a stat buffer of ours, a descriptor we hold.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(cannot(std::io::Error::last_os_error()));
        }
        st
    };
    // What the descriptor is, not what the path says now.
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(cannot)?;
    let c_real = CString::new(real.as_os_str().as_bytes())
        .map_err(|_| refuse(format!("{} contains a NUL byte", real.display())))?;
    Ok(Held {
        kind,
        configured: path.to_path_buf(),
        real,
        c_real,
        fd,
        dev: st.st_dev,
        ino: st.st_ino,
        dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
    })
}

/// The first symlink met while resolving `path` that lies inside one of `writable` (real paths),
/// where a command of the sandbox could have planted it.
pub(super) fn planted_link(path: &Path, writable: &[PathBuf]) -> Option<PathBuf> {
    let mut pending: Vec<OsString> = Vec::new();
    let push = |pending: &mut Vec<OsString>, path: &Path| {
        let parts: Vec<OsString> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        pending.extend(parts.into_iter().rev());
    };
    push(&mut pending, path);
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&part);
        let meta = std::fs::symlink_metadata(&next).ok()?;
        if !meta.file_type().is_symlink() {
            at = next;
            continue;
        }
        if writable.iter().any(|w| at.starts_with(w)) {
            return Some(next);
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return None;
        }
        let target = std::fs::read_link(&next).ok()?;
        if target.is_absolute() {
            at = PathBuf::from("/");
        }
        push(&mut pending, &target);
    }
    None
}

/// Nestings of configured paths (kind, real path) that cannot be enforced: a `ReadOnly` path that
/// is the root or a `ReadWrite` path (in every mode), or lies inside one (Landlock mode: its rules
/// only add rights, so the writable area's win).
pub(super) fn conflicts(areas: &[(Kind, &Path)], mode: Option<Mode>) -> Result<(), String> {
    for (kind, ro) in areas {
        if *kind != Kind::ReadOnly {
            continue;
        }
        for (other, rw) in areas {
            if *other == Kind::ReadOnly || !ro.starts_with(rw) {
                continue;
            }
            let area = match other {
                Kind::Root => "the workspace root",
                _ => "the readWrite path",
            };
            if ro == rw {
                return Err(format!(
                    "readOnly {} is also {area}: a path cannot be both",
                    ro.display()
                ));
            }
            if mode == Some(Mode::Landlock) {
                return Err(format!(
                    "readOnly {} lies inside {area} {}: Landlock mode cannot make part of a \
                     writable area read-only (namespaces mode can); move it out of there or \
                     drop one of the two",
                    ro.display(),
                    rw.display()
                ));
            }
        }
    }
    Ok(())
}

/// One bind of the namespaces template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mount {
    /// Index of the configured path bound (into the areas given to `mounts`).
    pub(super) source: usize,
    /// Where inside.
    pub(super) dst: PathBuf,
    pub(super) read_only: bool,
    /// `dst` lies inside an earlier bind, which a command may write: it is opened without following
    /// symlinks, and must exist.
    pub(super) inside_bind: bool,
}

/// The template's binds of the configured paths, given as (real host path, path inside,
/// read-only), the root first: each at its place, and again wherever its host path shows inside
/// another one (a readOnly directory inside the workspace is read-only at its runtime path too;
/// a writable one only where it lies under a read-only one),
/// ordered so that the more specific rule wins (a deeper bind lands on a shallower one). At one
/// place inside, read-only wins.
pub(super) fn mounts(areas: &[(&Path, &Path, bool)]) -> Vec<Mount> {
    let mut out: Vec<Mount> = Vec::new();
    let mut add = |mount: Mount| match out.iter_mut().find(|m| m.dst == mount.dst) {
        Some(m) => m.read_only |= mount.read_only,
        None => out.push(mount),
    };
    for (source, (host, dst, read_only)) in areas.iter().enumerate() {
        add(Mount {
            source,
            dst: dst.to_path_buf(),
            read_only: *read_only,
            inside_bind: false,
        });
        // A writable one needs its other places only where a read-only one would cover them
        // (elsewhere the bind it shows in is writable already, and a mount point cannot be
        // removed or renamed).
        let under_read_only = areas
            .iter()
            .any(|(h, _, ro)| *ro && host.starts_with(h) && host != h);
        if !read_only && !under_read_only {
            continue;
        }
        for (other_host, other_dst, _) in areas {
            if let Ok(relative) = host.strip_prefix(other_host) {
                if !relative.as_os_str().is_empty() {
                    add(Mount {
                        source,
                        dst: other_dst.join(relative),
                        read_only: *read_only,
                        inside_bind: false,
                    });
                }
            }
        }
    }
    out.sort_by_key(|m| m.dst.components().count());
    let dsts: Vec<PathBuf> = out.iter().map(|m| m.dst.clone()).collect();
    for m in &mut out {
        m.inside_bind = dsts.iter().any(|d| d != &m.dst && m.dst.starts_with(d));
    }
    out
}

impl Held {
    pub(super) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
