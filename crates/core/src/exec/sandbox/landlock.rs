//! Landlock mode's ruleset, built before the fork (raw system calls; the shell's process only
//! calls `landlock_restrict_self` on its descriptor).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::paths::{Kind, Resolved};
use super::policy::{present_secrets, DEV, DEVICES, ETC, SECRETS, SYSTEM_DIRS};
use super::setup::invalid_spec;
use super::Sandbox;

// Access rights (include/uapi/linux/landlock.h), by the ABI that introduced them.
const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
/// ABI 1: every right from EXECUTE (bit 0) to MAKE_SYM (bit 12).
const ABI1_FS: u64 = (1 << 13) - 1;
const REFER: u64 = 1 << 13; // ABI 2
const TRUNCATE: u64 = 1 << 14; // ABI 3
const IOCTL_DEV: u64 = 1 << 15; // ABI 5
const NET_BIND_TCP: u64 = 1 << 0; // ABI 4
const NET_CONNECT_TCP: u64 = 1 << 1; // ABI 4
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0; // ABI 6
const SCOPE_SIGNAL: u64 = 1 << 1; // ABI 6
/// Rights that apply to a file (not only to a directory's entries).
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
const CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;
/// The ABI that added each field of `struct landlock_ruleset_attr`: its size must not name fields
/// an older kernel does not know.
const ABI_NET: u32 = 4;
const ABI_SCOPE: u32 = 6;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI this kernel offers, or why none.
pub(super) fn abi() -> Result<u32, String> {
    // SAFETY: the version query reads no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi >= 1 {
        return Ok(abi as u32);
    }
    Err(match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no Landlock (Linux >= 5.13 built with \
                               CONFIG_SECURITY_LANDLOCK is needed)"
            .into(),
        Some(libc::EOPNOTSUPP) => "Landlock is built in but disabled (add landlock to the \
                                   kernel's lsm= boot parameter)"
            .into(),
        _ => format!("Landlock is unusable: {}", io::Error::last_os_error()),
    })
}

/// A ruleset ready to be applied by the shell's process.
pub(super) struct Ruleset {
    fd: OwnedFd,
}

impl Ruleset {
    /// Reads under the system dirs, `/etc` minus secrets, the readOnly paths, `/proc`; reads and
    /// writes under the root, the readWrite paths and `temp`; no TCP (ABI 4) when the network is off; signals and
    /// abstract sockets scoped to the sandbox (ABI 6).
    pub(super) fn new(
        sandbox: &Sandbox,
        paths: &Resolved,
        temp: &Path,
        abi: u32,
    ) -> io::Result<Ruleset> {
        let mut all_fs = ABI1_FS;
        if abi >= 2 {
            all_fs |= REFER;
        }
        if abi >= 3 {
            all_fs |= TRUNCATE;
        }
        if abi >= 5 {
            all_fs |= IOCTL_DEV;
        }
        let mut attr = RulesetAttr {
            handled_access_fs: all_fs,
            handled_access_net: 0,
            scoped: 0,
        };
        let mut size = size_of::<u64>();
        if abi >= ABI_NET {
            size = 2 * size_of::<u64>();
            if !sandbox.network {
                attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP;
            }
        }
        if abi >= ABI_SCOPE {
            size = size_of::<RulesetAttr>();
            attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
        }
        // SAFETY: `attr` is valid for `size` bytes.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0,
            )
        };
        if fd < 0 {
            return Err(invalid_spec(format!(
                "cannot create a Landlock ruleset: {}",
                io::Error::last_os_error()
            )));
        }
        let ruleset = Ruleset {
            // SAFETY: a descriptor we just got and own.
            fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        };
        let read = (EXECUTE | READ_FILE | READ_DIR) & all_fs;
        let dev = (READ_FILE | WRITE_FILE | IOCTL_DEV) & all_fs;
        for dir in SYSTEM_DIRS {
            ruleset.allow_if_present(Path::new(dir), read)?;
        }
        ruleset.allow_etc(read)?;
        ruleset.allow_if_present(Path::new("/proc"), READ_FILE | READ_DIR)?;
        for device in DEVICES {
            ruleset.allow_if_present(&Path::new(DEV).join(device), dev)?;
        }
        // The configured paths by the descriptors held since the sandbox was made: what their
        // paths name now does not matter.
        for held in &paths.held {
            let access = match held.kind {
                Kind::ReadOnly => read,
                Kind::Root | Kind::ReadWrite => all_fs,
            };
            ruleset.allow_fd(held.raw_fd(), held.dir, access, &held.real)?;
        }
        ruleset.allow(temp, all_fs)?;
        Ok(ruleset)
    }

    pub(super) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    fn allow_if_present(&self, path: &Path, access: u64) -> io::Result<()> {
        if path.exists() {
            self.allow(path, access)?;
        }
        Ok(())
    }

    /// Listing `/etc`, and reading every entry of it but the secrets (one level down where a
    /// directory holds secrets, like `/etc/ssh`).
    fn allow_etc(&self, read: u64) -> io::Result<()> {
        let secrets: Vec<PathBuf> = present_secrets().into_iter().map(|(p, _)| p).collect();
        self.allow_if_present(Path::new(ETC), READ_DIR)?;
        let mut dirs = vec![PathBuf::from(ETC)];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if secrets.contains(&path) || SECRETS.iter().any(|s| Path::new(s) == path) {
                    continue;
                }
                if secrets.iter().any(|s| s.starts_with(&path)) {
                    self.allow(&path, READ_DIR)?;
                    dirs.push(path);
                } else if path.exists() {
                    self.allow(&path, read)?;
                }
            }
        }
        Ok(())
    }

    fn allow(&self, path: &Path, access: u64) -> io::Result<()> {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| invalid_spec(format!("{} contains a NUL byte", path.display())))?;
        // SAFETY: opens a path we own the string of.
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(invalid_spec(format!(
                "cannot allow {} in the Landlock ruleset: {}",
                path.display(),
                io::Error::last_os_error()
            )));
        }
        // SAFETY: just opened.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
        self.allow_fd(fd.as_raw_fd(), is_dir, access, path)
    }

    /// Allows `access` beneath the file `fd` is open on (`path` names it in an error).
    fn allow_fd(&self, fd: i32, is_dir: bool, access: u64, path: &Path) -> io::Result<()> {
        let rule = PathBeneath {
            allowed_access: if is_dir { access } else { access & FILE_RIGHTS },
            parent_fd: fd,
        };
        // SAFETY: `rule` is a valid path-beneath rule.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &rule as *const PathBeneath,
                0,
            )
        };
        if r != 0 {
            return Err(invalid_spec(format!(
                "cannot allow {} in the Landlock ruleset: {}",
                path.display(),
                io::Error::last_os_error()
            )));
        }
        Ok(())
    }
}
