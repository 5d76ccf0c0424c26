//! The bounded root: resolving and opening paths beneath a workspace root
//! without check-then-use races. One API on every target, implemented on
//! descriptors (`unix.rs`) and on handles (`windows.rs`); this file holds the
//! types both share.
//!
//! Every path is walked one component at a time from a directory held open
//! on the root, and the system never follows a symlink for us: we read it
//! and splice its target into the walk ourselves, so an absolute target that
//! points back inside the root is honoured and any target that leaves the
//! root is refused (`ErrorKind::Outside`). `..` pops our own stack of open
//! directories, never the system's `..`, so a directory renamed or swapped
//! mid-walk cannot lead us out. The final operation is done relative to the
//! parent the walk holds: what is opened, created or listed is what was
//! checked.
//!
//! A root has three names for itself: the path it was opened at, its
//! canonical form and the runtime path the agent sees (`runtimeRoot`, e.g.
//! `/workspace`); a path under any of them names the same file.
//!
//! With a [`Policy`](crate::policy::Policy) (`Root::with_policy`), every
//! operation also asks it, on both the path as given (`.` and `..` taken
//! lexically) and the path the resolution reached (symlinks followed): reads
//! (open, read, `access` "r", `stat`, `exists`, listing a directory) refuse a
//! denied-read target, writes (`write_file`, `mkdir_all`, `access` "rw") a
//! denied-write or protected one, with `Error::protected` naming the rule. A
//! listing leaves denied-read entries out.

pub use crate::error::Result;
pub use runtime::RuntimeMap;

mod runtime;

#[cfg(unix)]
mod recent;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;
#[cfg(target_os = "linux")]
mod view;
#[cfg(target_os = "linux")]
pub use view::ViewState;
#[cfg(windows)]
mod names;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// What `stat` reports (symlinks followed, still bounded).
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    /// A directory.
    pub is_dir: bool,
    /// A regular file.
    pub is_file: bool,
    /// The path itself is a symlink (its target is what the other fields
    /// describe; never on Windows, where a resolution ends on the target).
    pub is_symlink: bool,
    /// Size in bytes (0 for a directory on Windows, as libuv reports).
    pub size: u64,
    /// Last modification, in milliseconds since the Unix epoch (Node's `mtimeMs`).
    pub mtime_ms: f64,
    /// File type and permission bits (`st_mode`; on Windows libuv's: the type
    /// bits, and 0o444 for a read-only file or 0o666 otherwise).
    pub mode: u32,
}

/// Access to check, like `R_OK` / `R_OK | W_OK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Readable (`R_OK`).
    Read,
    /// Readable and writable (`R_OK | W_OK`).
    ReadWrite,
}

impl Access {
    /// The access a face's mode names: `"rw"` is R_OK | W_OK (pi's edit
    /// tool), anything else R_OK (its read tool).
    pub fn from_mode(mode: &str) -> Access {
        if mode == "rw" {
            Access::ReadWrite
        } else {
            Access::Read
        }
    }
}
