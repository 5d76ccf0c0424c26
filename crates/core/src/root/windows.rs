//! The bounded root on Windows: the same API and guarantee as the unix one
//! (`unix.rs`), on handles. Design notes: docs/windows.md.
//!
//! Every path is walked one component at a time from a directory handle held
//! on the root: each name is opened relative to the handle of its parent
//! (`NtCreateFile` with `RootDirectory`, the Windows `openat`) with
//! `FILE_OPEN_REPARSE_POINT`, so the system never follows a symlink or
//! junction for us. A symlink or junction is read (`FSCTL_GET_REPARSE_POINT`)
//! and its target spliced into the walk, as on unix: a target inside the root
//! is honoured, one outside refused. Other reparse points are never followed:
//! they are opened as themselves. `..` pops our own stack of open directories.
//! Directories on the stack are held without `FILE_SHARE_DELETE`, so they
//! cannot be renamed away while we walk beneath them. Every directory we
//! enter and every entry we act on is also checked by its final path
//! (`GetFinalPathNameByHandleW`) to lie under the root's: whatever the
//! filesystem resolved behind our back (wine's unix symlinks, a filter
//! driver's redirection) is refused too.
//!
//! Under wine a unix symlink is no reparse point: wine's open follows it, and
//! a final path is looked up by name after the open, so a link swapped in and
//! out between the two would pass that check. There every directory opened by
//! name is checked by identity instead (`verify_child`): the directory the
//! kernel has as its `..` must be the very directory it was opened in, or (a
//! unix symlink inside the root, which wine follows) it must be the directory
//! its final path names, reached from the root by directories so checked.
//!
//! Names that Win32 would read differently from the filesystem are refused
//! with `EINVAL` rather than guessed at: alternate data streams (`a.txt:s`),
//! reserved device names (`CON`, `nul.txt`, `COM1`), trailing dots and spaces,
//! and the characters `<>"|?*`. Paths must be absolute (`C:\…`, `\\?\C:\…`,
//! `\\server\share\…`, `/` or `\` as separators); a drive-relative `C:foo`, a
//! rooted `\foo` or a device path `\\.\…` is outside the workspace. Names
//! compare case-insensitively, as the filesystem does; an 8.3 short name
//! names the same file as its long name.
//!
//! Under a policy (`with_policy`), a path is asked of its rules as given and
//! as reached: the reached path is the handle's final path relative to the
//! root's, so its names are the filesystem's own (long names, their stored
//! case) and an 8.3 short name or a case variant cannot dodge a rule (which
//! the policy compiles case-insensitively on Windows too). Rules see `/`
//! separators, as on unix.
//!
//! One file past 800 lines on purpose, as `unix.rs`: every operation is a use
//! of the one component walk and the handles it holds, whose rules (the
//! identity checks, when the policy is asked) stay private to it.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::windows::ffi::OsStringExt;
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use windows_sys::Wdk::Foundation::OBJECT_ATTRIBUTES;
use windows_sys::Wdk::Storage::FileSystem::{
    FileDispositionInformation, FileIdFullDirectoryInformation, FileRenameInformation,
    NtCreateFile, NtQueryDirectoryFile, NtSetInformationFile, FILE_CREATE, FILE_DIRECTORY_FILE,
    FILE_NON_DIRECTORY_FILE, FILE_OPEN, FILE_OPEN_FOR_BACKUP_INTENT, FILE_OPEN_IF,
    FILE_OPEN_REPARSE_POINT, FILE_RENAME_INFORMATION, FILE_SYNCHRONOUS_IO_NONALERT,
};
use windows_sys::Wdk::Storage::FileSystem::{
    FileInternalInformation, NtQueryInformationFile, FILE_ID_FULL_DIR_INFORMATION,
    FILE_INTERNAL_INFORMATION,
};
use windows_sys::Win32::Foundation::{
    RtlNtStatusToDosError, HANDLE, OBJ_CASE_INSENSITIVE, STATUS_NOT_A_DIRECTORY,
    STATUS_NO_MORE_FILES, STATUS_OBJECT_NAME_COLLISION, STATUS_OBJECT_NAME_NOT_FOUND,
    STATUS_OBJECT_PATH_NOT_FOUND, UNICODE_STRING,
};
use windows_sys::Win32::Storage::FileSystem::{
    FileAttributeTagInfo, FileBasicInfo, FileFullDirectoryInfo, FileFullDirectoryRestartInfo,
    FileStandardInfo, GetFileInformationByHandleEx, GetFinalPathNameByHandleW, DELETE,
    FILE_ATTRIBUTE_ARCHIVE, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_HIDDEN, FILE_ATTRIBUTE_NORMAL,
    FILE_ATTRIBUTE_NOT_CONTENT_INDEXED, FILE_ATTRIBUTE_READONLY, FILE_ATTRIBUTE_REPARSE_POINT,
    FILE_ATTRIBUTE_SYSTEM, FILE_ATTRIBUTE_TAG_INFO, FILE_BASIC_INFO, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_GENERIC_READ, FILE_GENERIC_WRITE, FILE_LIST_DIRECTORY, FILE_READ_ATTRIBUTES,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_STANDARD_INFO, FILE_TRAVERSE,
    SYNCHRONIZE,
};
use windows_sys::Win32::System::Ioctl::FSCTL_GET_REPARSE_POINT;
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows_sys::Win32::System::IO::{DeviceIoControl, IO_STATUS_BLOCK};

pub(crate) use super::names::{eq_ci, normalize, strip_prefix_ci};
use super::{Access, Result, RuntimeMap, Stat};
use crate::error::{Error, ErrorKind};
use crate::policy::Policy;

/// Symlinks and junctions expanded in one resolution before giving up, as
/// Linux's `MAXSYMLINKS` (Windows itself stops at 63 reparses).
const MAX_SYMLINKS: usize = 40;

/// `IO_REPARSE_TAG_SYMLINK`: a symbolic link (file or directory).
const TAG_SYMLINK: u32 = 0xA000_000C;
/// `IO_REPARSE_TAG_MOUNT_POINT`: a junction (or a volume mount point).
const TAG_MOUNT_POINT: u32 = 0xA000_0003;
/// `SYMLINK_FLAG_RELATIVE`: the symlink's target is relative to its directory.
const SYMLINK_FLAG_RELATIVE: u32 = 1;
/// `MAXIMUM_REPARSE_DATA_BUFFER_SIZE`: the most a reparse point can hold (16 KiB).
const REPARSE_BUFFER_BYTES: usize = 16 * 1024;
/// Bytes one directory-listing call fills: 64 KiB holds a few hundred entries.
const LIST_BUFFER_BYTES: usize = 64 * 1024;
/// `ERROR_NO_MORE_FILES`: a listing has ended.
const ERROR_NO_MORE_FILES: i32 = 18;
/// 100-ns intervals between 1601-01-01 (Windows' epoch) and 1970-01-01.
const EPOCH_DIFF_100NS: i64 = 116_444_736_000_000_000;
/// The longest name of one entry NTFS (and ReFS, exFAT) allows, in UTF-16 units;
/// longer is refused before any system call.
const MAX_COMPONENT_UNITS: usize = 255;
/// The longest name `UNICODE_STRING` can carry (its length is a u16 in bytes).
const MAX_NAME_UNITS: usize = (u16::MAX / 2) as usize;

/// A directory entry found by a resolution: the open parent directory and the
/// final name inside it (`"."` when the path is that directory itself).
struct Entry {
    parent: OwnedHandle,
    /// The parent's identity (see [`verify_child`]).
    parent_key: DirKey,
    name: String,
    /// The path of the entry relative to the root, as walked.
    rel: PathBuf,
}

/// A directory the walk of a path holds open beneath the root.
struct Held {
    dir: OwnedHandle,
    /// Its name in its parent, as walked.
    name: String,
    /// Its identity (see [`verify_child`]).
    key: DirKey,
}

/// A directory's identity: its file ID (`FileInternalInformation`; under wine
/// the inode number). Only wine's are compared (see [`verify_child`]);
/// elsewhere it is left zero, never asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DirKey(u64);

/// Whether this process runs under wine (its ntdll has `wine_get_version`),
/// whose filesystem follows unix symlinks that are no reparse points.
pub(crate) fn under_wine() -> bool {
    static WINE: OnceLock<bool> = OnceLock::new();
    *WINE.get_or_init(|| {
        let ntdll: Vec<u16> = "ntdll.dll\0".encode_utf16().collect();
        // SAFETY: both names are NUL-terminated and outlive the calls, which only look them up.
        unsafe {
            let module = GetModuleHandleW(ntdll.as_ptr());
            !module.is_null()
                && GetProcAddress(module, c"wine_get_version".as_ptr().cast()).is_some()
        }
    })
}

/// The identity of the directory `h` under wine; a zero key elsewhere.
/// (`FileInternalInformation` is answered from the handle alone; `FileIdInfo`,
/// which adds the volume, costs wine a lookup of the volume on every call.)
pub(crate) fn dir_key(h: BorrowedHandle<'_>) -> Result<DirKey> {
    if !under_wine() {
        return Ok(DirKey::default());
    }
    let mut info = FILE_INTERNAL_INFORMATION::default();
    // SAFETY: an all-zero IO_STATUS_BLOCK is a valid value.
    let mut status_block: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is writable for its size, which is passed, and is the record of this class.
    let status = unsafe {
        NtQueryInformationFile(
            h.as_raw_handle() as HANDLE,
            &mut status_block,
            (&mut info as *mut FILE_INTERNAL_INFORMATION).cast(),
            std::mem::size_of::<FILE_INTERNAL_INFORMATION>() as u32,
            FileInternalInformation,
        )
    };
    if status < 0 {
        return Err(nt_error(status));
    }
    Ok(DirKey(info.IndexNumber as u64))
}

/// Under wine, refuses the directory `child`, opened by name in the directory
/// whose identity is `parent`, unless it is that directory's own child: with
/// `parent` as its `..` (which wine lists as the kernel has it, whatever name
/// led to `child`). A unix symlink swapped in while the name was
/// opened leads to a directory whose `..` is elsewhere. Answers the child's
/// identity. Elsewhere nothing is asked: Windows opens a link as itself
/// (`FILE_OPEN_REPARSE_POINT`), never the directory it leads to.
///
/// `listed_later`: `child` will be listed, so `..` is asked through a handle
/// of its own (a listing's name filter stays with the handle it was first
/// given to); a directory only walked through is asked directly.
pub(crate) fn verify_child(
    parent: DirKey,
    child: BorrowedHandle<'_>,
    listed_later: bool,
) -> Result<DirKey> {
    if !under_wine() {
        return Ok(DirKey::default());
    }
    let key = dir_key(child)?;
    let own = if listed_later {
        let h = nt_open(
            child,
            &[],
            FILE_LIST_DIRECTORY | SYNCHRONIZE,
            FILE_OPEN,
            FILE_DIRECTORY_FILE,
            0,
        )
        .map_err(nt_error)?;
        Some(h)
    } else {
        None
    };
    let listing = own.as_ref().map_or(child, |h| h.as_handle_ref());
    let dotdot = [b'.' as u16; 2];
    let mask = UNICODE_STRING {
        Length: 4,
        MaximumLength: 4,
        Buffer: dotdot.as_ptr() as *mut u16,
    };
    // u64s: the record is 8-byte aligned; room for one entry named "..".
    let mut buf = [0u64; 16];
    // SAFETY: an all-zero IO_STATUS_BLOCK is a valid value.
    let mut status_block: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    // SAFETY: `buf` is writable for the length passed; `mask` and the name it points to outlive
    // the call; no event or APC is given and the handle is synchronous, so the call has
    // completed when it returns.
    let status = unsafe {
        NtQueryDirectoryFile(
            listing.as_raw_handle() as HANDLE,
            std::ptr::null_mut(),
            None,
            std::ptr::null(),
            &mut status_block,
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(&buf) as u32,
            FileIdFullDirectoryInformation,
            true,
            &mask,
            true,
        )
    };
    if status < 0 {
        return Err(nt_error(status));
    }
    // SAFETY: the call filled the start of `buf` (8-byte aligned, large enough) with one record.
    let entry = unsafe { buf.as_ptr().cast::<FILE_ID_FULL_DIR_INFORMATION>().read() };
    if entry.FileNameLength != 4 || DirKey(entry.FileId as u64) != parent {
        return Err(Error::outside());
    }
    Ok(key)
}

/// A workspace root on Windows. Paths under the runtime root, the root as
/// given or its canonical form all map to the same host directory.
#[derive(Debug)]
pub struct Root {
    dir: OwnedHandle,
    /// The root directory's identity (see [`verify_child`]).
    key: DirKey,
    host: PathBuf,
    /// The root's final path (as `host`, in its own spelling) and the
    /// agent's path of the root.
    paths: RuntimeMap,
    /// The root's final path (normalized, see [`normalize`]): every handle we
    /// act on must have its own final path under it.
    final_path: String,
    /// Prefixes mapping to the root (normalized), longest first.
    aliases: Vec<String>,
    /// What this root refuses to read or write beyond the bounds.
    policy: Option<Arc<Policy>>,
}

/// The refusal of reading `rel` (`/`-separated), if denied.
fn refuse_read(policy: &Policy, rel: &str, is_dir: bool) -> Result<()> {
    match policy.read_denial(Path::new(rel), is_dir) {
        Some(denial) => Err(Error::protected(denial.rule)),
        None => Ok(()),
    }
}

/// The refusal of writing `rel` (`/`-separated), if denied or protected.
fn refuse_write(policy: &Policy, rel: &str, is_dir: bool) -> Result<()> {
    match policy.write_denial(Path::new(rel), is_dir) {
        Some(denial) => Err(Error::protected(denial.rule)),
        None => Ok(()),
    }
}

/// `rel/name`, `/`-separated (`name` alone at the root).
fn join_rel(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

impl Root {
    /// Opens `host` (an existing directory) as a root whose agent-visible path
    /// is `runtime` (default: `host`).
    pub fn open(host: &Path, runtime: Option<&Path>) -> Result<Root> {
        let unavailable = |e: io::Error| Error::root_unavailable(host, io_errno(&e));
        let canonical = std::fs::canonicalize(host).map_err(unavailable)?;
        let file = std::fs::OpenOptions::new()
            .access_mode(DIR_ACCESS)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
            .open(&canonical)
            .map_err(unavailable)?;
        let dir = OwnedHandle::from(file);
        let (attrs, _) = tag_info(dir.as_handle_ref())
            .map_err(|e| Error::root_unavailable(host, e.errno().unwrap_or(libc::EIO)))?;
        if attrs & FILE_ATTRIBUTE_DIRECTORY == 0 {
            return Err(Error::root_unavailable(host, libc::ENOTDIR));
        }
        let final_path = final_path(dir.as_handle_ref())
            .ok()
            .and_then(|p| normalize(&p))
            .ok_or_else(|| Error::root_unavailable(host, libc::ENOENT))?;
        let runtime = runtime
            .map(Path::to_path_buf)
            .unwrap_or_else(|| host.to_path_buf());
        let canonical = normalize(canonical.as_os_str()).unwrap_or_else(|| final_path.clone());
        let mut aliases: Vec<String> = [runtime.as_os_str(), host.as_os_str()]
            .into_iter()
            .filter_map(normalize)
            .chain([canonical.clone(), final_path.clone()])
            .collect();
        aliases.sort_by_key(|a| std::cmp::Reverse(a.len()));
        aliases.dedup();
        let key = dir_key(dir.as_handle_ref())
            .map_err(|e| Error::root_unavailable(host, e.errno().unwrap_or(libc::EIO)))?;
        Ok(Root {
            dir,
            key,
            host: PathBuf::from(canonical),
            paths: RuntimeMap::new(final_path.clone(), runtime),
            final_path,
            aliases,
            policy: None,
        })
    }

    /// The same root with `policy` asked by every operation.
    pub fn with_policy(mut self, policy: Arc<Policy>) -> Root {
        self.policy = Some(policy);
        self
    }

    /// The root's policy, if it has one.
    pub fn policy(&self) -> Option<&Arc<Policy>> {
        self.policy.as_ref()
    }

    /// The policy when it has read rules: with none, reads ask nothing.
    fn read_rules(&self) -> Option<&Policy> {
        self.policy.as_deref().filter(|p| !p.reads_unrestricted())
    }

    /// The policy when it has write rules (its own or the protected ones).
    fn write_rules(&self) -> Option<&Policy> {
        self.policy.as_deref().filter(|p| !p.writes_unrestricted())
    }

    /// The path as given, relative to the root, `..` taken lexically and
    /// `/`-separated (the form the policy's rules are asked in).
    fn lexical(&self, path: &Path) -> Result<String> {
        let mut parts: Vec<&str> = Vec::new();
        let rel = self.relative(path.as_os_str())?;
        for c in rel.split(['\\', '/']) {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop().ok_or_else(Error::outside)?;
                }
                name => parts.push(name),
            }
        }
        Ok(parts.join("/"))
    }

    /// Where the handle is, relative to the root and `/`-separated, from its
    /// final path: the filesystem's own names, whatever spelling led there.
    fn reached(&self, handle: BorrowedHandle<'_>) -> Result<String> {
        let path = final_path(handle).map_err(|_| Error::outside())?;
        let path = normalize(&path).ok_or_else(Error::outside)?;
        strip_prefix_ci(&path, &self.final_path)
            .map(|rel| rel.replace('\\', "/"))
            .ok_or_else(Error::outside)
    }

    /// Refuses reading `path` (reached as the open `h`) if the policy denies
    /// it as given or as reached.
    fn check_read(&self, path: &Path, h: BorrowedHandle<'_>) -> Result<()> {
        let Some(policy) = self.read_rules() else {
            return Ok(());
        };
        let (attrs, _) = tag_info(h)?;
        let is_dir = attrs & FILE_ATTRIBUTE_DIRECTORY != 0;
        refuse_read(policy, &self.lexical(path)?, is_dir)?;
        refuse_read(policy, &self.reached(h)?, is_dir)
    }

    /// Refuses a denied-read `path` before it is walked (the path as given,
    /// as a file: a directory rule is asked once it is reached).
    fn check_read_given(&self, path: &Path) -> Result<()> {
        match self.read_rules() {
            Some(policy) => refuse_read(policy, &self.lexical(path)?, false),
            None => Ok(()),
        }
    }

    /// Refuses writing the file `e` (`path` as given) if the policy denies it
    /// as given or where it is: the existing file's final path, or the
    /// parent's final path and the new name.
    fn check_write(&self, path: &Path, e: &Entry) -> Result<()> {
        let Some(policy) = self.write_rules() else {
            return Ok(());
        };
        refuse_write(policy, &self.lexical(path)?, false)?;
        let parent = e.parent.as_handle_ref();
        let reached = match nt_open(
            parent,
            &wide(&e.name),
            PROBE_ACCESS,
            FILE_OPEN,
            0,
            SHARE_ALL,
        ) {
            Ok(h) => self.reached(h.as_handle_ref())?,
            Err(s) if is_not_found(s) => join_rel(&self.reached(parent)?, &e.name),
            Err(s) => return Err(nt_error(s)),
        };
        refuse_write(policy, &reached, false)
    }

    /// The canonical host path of the root.
    pub fn host(&self) -> &Path {
        &self.host
    }

    /// The agent-visible path of the root.
    pub fn runtime(&self) -> &Path {
        &self.paths.runtime
    }

    /// The path relative to the root (`\`-separated, possibly empty), if
    /// `path` (absolute) lies lexically under one of the root's aliases.
    fn relative(&self, path: &OsStr) -> Result<String> {
        let path = normalize(path).ok_or_else(Error::outside)?;
        self.aliases
            .iter()
            .find_map(|a| strip_prefix_ci(&path, a))
            .map(str::to_string)
            .ok_or_else(Error::outside)
    }

    /// Maps a host path inside the root to its runtime form.
    pub fn to_runtime(&self, host_path: &Path) -> PathBuf {
        self.paths.to_runtime(host_path)
    }

    /// The root's two paths: its final host path and the agent's.
    pub fn paths(&self) -> &RuntimeMap {
        &self.paths
    }

    fn top<'a>(&'a self, stack: &'a [Held]) -> BorrowedHandle<'a> {
        stack
            .last()
            .map_or(self.dir.as_handle_ref(), |held| held.dir.as_handle_ref())
    }

    fn top_key(&self, stack: &[Held]) -> DirKey {
        stack.last().map_or(self.key, |held| held.key)
    }

    /// Refuses a handle whose final path is not the root or beneath it.
    fn check_inside(&self, handle: BorrowedHandle<'_>) -> Result<()> {
        // A handle whose path cannot be told (a device, a path wine cannot map
        // back) is not known to be inside: refused.
        let path = final_path(handle).map_err(|_| Error::outside())?;
        match normalize(&path) {
            Some(p) if strip_prefix_ci(&p, &self.final_path).is_some() => Ok(()),
            _ => Err(Error::outside()),
        }
    }

    /// [`verify_child`], or else, under wine, the directory a unix symlink
    /// inside the root led to (wine follows it): `dir` must then be, by
    /// identity, the directory its final path names, reached from the root
    /// through directories each verified as its parent's child. Answers its
    /// identity.
    fn verify_dir(
        &self,
        parent: DirKey,
        dir: BorrowedHandle<'_>,
        listed_later: bool,
    ) -> Result<DirKey> {
        match verify_child(parent, dir, listed_later) {
            Err(e) if e.kind() == ErrorKind::Outside => {}
            verified => return verified,
        }
        let key = dir_key(dir)?;
        let (mut at, mut at_key): (Option<OwnedHandle>, DirKey) = (None, self.key);
        for name in self.reached(dir)?.split('/').filter(|n| !n.is_empty()) {
            let top = at
                .as_ref()
                .map_or(self.dir.as_handle_ref(), |h| h.as_handle_ref());
            let next = open_dir(top, &wide(name)).map_err(|_| Error::outside())?;
            at_key = verify_child(at_key, next.as_handle_ref(), false)?;
            at = Some(next);
        }
        if at_key != key {
            return Err(Error::outside());
        }
        Ok(key)
    }

    /// Walks `path` beneath the root, a symlink in the last position expanded
    /// too; `create_dirs` makes missing directories on the way (including the
    /// last component).
    fn resolve(&self, path: &Path, create_dirs: bool) -> Result<Entry> {
        let mut pending: VecDeque<String> = VecDeque::new();
        push_front_components(&mut pending, &self.relative(path.as_os_str())?);
        let mut stack: Vec<Held> = Vec::new();
        let mut symlinks = 0;
        let mut retries = 0;
        while let Some(name) = pending.pop_front() {
            if name == ".." {
                stack.pop().ok_or_else(Error::outside)?;
                continue;
            }
            check_name(&name)?;
            let last = pending.is_empty();
            let top = self.top(&stack);
            let wide_name = wide(&name);
            let probe = match nt_open(top, &wide_name, PROBE_ACCESS, FILE_OPEN, 0, SHARE_ALL) {
                Ok(h) => h,
                Err(s) if is_not_found(s) && create_dirs => {
                    if let Some(policy) = self.write_rules() {
                        refuse_write(policy, &join_rel(&self.reached(top)?, &name), true)?;
                    }
                    create_dir(top, &wide_name)?;
                    pending.push_front(name);
                    continue;
                }
                Err(s) if is_not_found(s) && last => {
                    return self.entry(top, &stack, name);
                }
                Err(s) => return Err(nt_error(s)),
            };
            // First where it is: what the filesystem resolved behind our back (wine's
            // unix symlinks) is refused before anything else is asked of it.
            self.check_inside(probe.as_handle_ref())?;
            let (attrs, tag) = tag_info(probe.as_handle_ref())?;
            if is_link(attrs, tag) {
                symlinks += 1;
                if symlinks > MAX_SYMLINKS {
                    return Err(Error::os(libc::ELOOP));
                }
                match reparse_target(probe.as_handle_ref())? {
                    Target::Absolute(target) => {
                        let rel = self.relative(OsStr::new(&target))?;
                        stack.clear();
                        push_front_components(&mut pending, &rel);
                    }
                    Target::Relative(target) => push_front_components(&mut pending, &target),
                    Target::Rooted(target) => {
                        // `\x` on the drive of the link: the root's drive.
                        let drive: String = self.final_path.chars().take(2).collect();
                        let rel = self.relative(OsStr::new(&format!("{drive}{target}")))?;
                        stack.clear();
                        push_front_components(&mut pending, &rel);
                    }
                }
                continue;
            }
            let is_dir = attrs & FILE_ATTRIBUTE_DIRECTORY != 0;
            if is_dir && (!last || create_dirs) {
                drop(probe);
                match open_dir(top, &wide_name) {
                    Ok(dir) => {
                        let (attrs, tag) = tag_info(dir.as_handle_ref())?;
                        // Swapped for a link since the probe: look again, a bounded
                        // number of times, so a hostile swapper cannot spin us forever.
                        if is_link(attrs, tag) {
                            if retries >= MAX_SYMLINKS {
                                return Err(Error::os(libc::ELOOP));
                            }
                            retries += 1;
                            pending.push_front(name);
                            continue;
                        }
                        // Under wine its identity is checked instead, which a swap cannot pass.
                        if !under_wine() {
                            self.check_inside(dir.as_handle_ref())?;
                        }
                        let key =
                            self.verify_dir(self.top_key(&stack), dir.as_handle_ref(), false)?;
                        stack.push(Held { dir, name, key });
                    }
                    Err(s)
                        if (is_not_found(s) || s == STATUS_NOT_A_DIRECTORY)
                            && retries < MAX_SYMLINKS =>
                    {
                        retries += 1;
                        pending.push_front(name);
                    }
                    Err(s) => return Err(nt_error(s)),
                }
            } else if last {
                return self.entry(top, &stack, name);
            } else {
                // Windows' answer for a path through a file (ERROR_PATH_NOT_FOUND).
                return Err(Error::os(libc::ENOENT));
            }
        }
        // The walk ended on a directory we hold open (the root, a `..`, or a
        // link to a directory): the entry is that directory itself.
        let top = self.top(&stack);
        self.entry(top, &stack, ".".to_string())
    }

    fn entry(&self, parent: BorrowedHandle<'_>, stack: &[Held], name: String) -> Result<Entry> {
        let mut rel: PathBuf = stack.iter().map(|held| held.name.as_str()).collect();
        if name != "." {
            rel.push(&name);
        }
        let parent_key = self.top_key(stack);
        let parent = parent.try_clone_to_owned().map_err(io_error)?;
        Ok(Entry {
            parent,
            parent_key,
            name,
            rel,
        })
    }

    /// Opens the entry itself (never following a reparse point) with `access`.
    fn open_entry(&self, e: &Entry, access: u32, options: u32) -> Result<OwnedHandle> {
        if e.name == "." {
            if options & FILE_NON_DIRECTORY_FILE != 0 {
                return Err(Error::os(libc::EISDIR));
            }
            return nt_open(
                e.parent.as_handle_ref(),
                &[],
                access,
                FILE_OPEN,
                options,
                SHARE_ALL,
            )
            .map_err(nt_error);
        }
        // Opened whatever it is, then asked: a directory opened as a file fails
        // with a plain access denial (STATUS_FILE_IS_A_DIRECTORY maps to it).
        let h = nt_open(
            e.parent.as_handle_ref(),
            &wide(&e.name),
            access,
            FILE_OPEN,
            options & !FILE_NON_DIRECTORY_FILE,
            SHARE_ALL,
        )
        .map_err(nt_error)?;
        self.check_inside(h.as_handle_ref())?;
        if options & FILE_NON_DIRECTORY_FILE != 0 || under_wine() {
            let (attrs, _) = tag_info(h.as_handle_ref())?;
            if attrs & FILE_ATTRIBUTE_DIRECTORY != 0 {
                if options & FILE_NON_DIRECTORY_FILE != 0 {
                    return Err(Error::os(libc::EISDIR));
                }
                self.verify_dir(e.parent_key, h.as_handle_ref(), true)?;
            }
        }
        Ok(h)
    }

    /// Opens a file to read what it holds, symlinks followed within the root.
    /// A directory is refused with `EISDIR` (Node's read of one).
    pub fn open_read(&self, path: &Path) -> Result<File> {
        named("open", path, || {
            self.check_read_given(path)?;
            let e = self.resolve(path, false)?;
            let h = self
                .open_entry(&e, FILE_GENERIC_READ, FILE_NON_DIRECTORY_FILE)
                .map_err(|err| match err.errno() {
                    Some(libc::EISDIR) => Error::read(libc::EISDIR),
                    _ => err,
                })?;
            self.check_read(path, h.as_handle_ref())?;
            Ok(File::from(h))
        })
    }

    /// As [`Root::open_read`]: Windows has no FIFO to wait on.
    pub fn open_any(&self, path: &Path) -> Result<File> {
        self.open_read(path)
    }

    /// Reads a whole file as Node's `fs.readFile` does: up to its size at
    /// open time, refused past [`MAX_READ_BYTES`](crate::error::MAX_READ_BYTES) with Node's
    /// `ERR_FS_FILE_TOO_LARGE`. Memory is reserved only up to the read's reserve (`whole_read`).
    pub fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        self.read_file_within(path, crate::error::MAX_READ_BYTES)
    }

    /// [`Root::read_file`] for a face that carries at most `max` bytes in one answer (the remote
    /// protocol's frame): a larger file is refused before any of it is read, with the same
    /// kind and code as Node's refusal.
    pub fn read_file_within(&self, path: &Path, max: u64) -> Result<Vec<u8>> {
        let file = self.open_read(path)?;
        let meta = file.metadata().map_err(|e| io_error(e).at("open", path))?;
        let claimed = if meta.is_file() { meta.len() } else { 0 };
        crate::whole_read::whole(&file, claimed, max)
    }

    /// Reads at most `len` bytes from the start of a file.
    pub fn read_head(&self, path: &Path, len: usize) -> Result<Vec<u8>> {
        crate::whole_read::head(&self.open_read(path)?, len)
    }

    /// Checks that the file exists and grants `access`: as libuv on Windows,
    /// write access is refused (`EPERM`) only for a read-only file.
    pub fn access(&self, path: &Path, access: Access) -> Result<()> {
        named("access", path, || {
            self.check_read_given(path)?;
            let e = self.resolve(path, false)?;
            let h = self.open_entry(&e, PROBE_ACCESS, 0)?;
            self.check_read(path, h.as_handle_ref())?;
            if access == Access::ReadWrite {
                self.check_write(path, &e)?;
            }
            let (attrs, _) = tag_info(h.as_handle_ref())?;
            let read_only =
                attrs & FILE_ATTRIBUTE_READONLY != 0 && attrs & FILE_ATTRIBUTE_DIRECTORY == 0;
            match access {
                Access::ReadWrite if read_only => Err(Error::os(libc::EPERM)),
                _ => Ok(()),
            }
        })
    }

    /// Whether the path exists inside the root (false when outside).
    pub fn exists(&self, path: &Path) -> bool {
        self.stat(path).is_ok()
    }

    /// pi's `ls.exists` and `find.exists`: false for a missing path, the
    /// refusal for a path leaving the root.
    pub fn exists_inside(&self, path: &Path) -> Result<bool> {
        if self.exists(path) {
            return Ok(true);
        }
        match self.resolve_existing(path) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::Outside | ErrorKind::Protected) => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// [`Root::stat`], answered at once: on Windows it is one open and two
    /// queries of the handle whatever the path.
    pub fn stat_quick(&self, path: &Path) -> Option<Result<Stat>> {
        Some(self.stat(path))
    }

    /// [`Root::exists_inside`], answered at once (as `stat_quick`).
    pub fn exists_quick(&self, path: &Path) -> Option<Result<bool>> {
        Some(self.exists_inside(path))
    }

    /// The same root (on Windows the root is always the directory its
    /// handle was opened on: following the path is not done there).
    pub fn pinned(self, _pinned: bool) -> Root {
        self
    }

    /// Runs `f`: on Windows the root is never checked against its path, so
    /// there is nothing to trust.
    pub fn trusting<T>(&self, f: impl FnOnce() -> T) -> T {
        f()
    }

    /// Whether the root stays the directory it opened: always on Windows.
    pub fn is_pinned(&self) -> bool {
        true
    }

    /// Status of the path, symlinks followed within the root.
    pub fn stat(&self, path: &Path) -> Result<Stat> {
        named("stat", path, || {
            self.check_read_given(path)?;
            let e = self.resolve(path, false)?;
            let h = self.open_entry(&e, PROBE_ACCESS, 0)?;
            self.check_read(path, h.as_handle_ref())?;
            let basic: FILE_BASIC_INFO = file_info(h.as_handle_ref(), FileBasicInfo)?;
            let standard: FILE_STANDARD_INFO = file_info(h.as_handle_ref(), FileStandardInfo)?;
            let is_dir = basic.FileAttributes & FILE_ATTRIBUTE_DIRECTORY != 0;
            let perm = if basic.FileAttributes & FILE_ATTRIBUTE_READONLY != 0 {
                0o444
            } else {
                0o666
            };
            let kind = if is_dir { S_IFDIR } else { S_IFREG };
            Ok(Stat {
                is_dir,
                is_file: !is_dir,
                is_symlink: false,
                size: if is_dir {
                    0
                } else {
                    standard.EndOfFile.max(0) as u64
                },
                mtime_ms: mtime_ms(basic.LastWriteTime),
                mode: kind | perm,
            })
        })
    }

    /// The host path of an existing directory inside the root, links
    /// resolved.
    pub fn resolve_dir(&self, path: &Path) -> Result<PathBuf> {
        named("scandir", path, || match self.existing(path)? {
            (host, true) => Ok(host),
            (_, false) => Err(Error::os(libc::ENOTDIR)),
        })
    }

    /// The host path of an existing entry inside the root and whether it is
    /// a directory.
    pub fn resolve_existing(&self, path: &Path) -> Result<(PathBuf, bool)> {
        named("stat", path, || self.existing(path))
    }

    fn existing(&self, path: &Path) -> Result<(PathBuf, bool)> {
        self.check_read_given(path)?;
        let e = self.resolve(path, false)?;
        let h = self.open_entry(&e, PROBE_ACCESS, 0)?;
        self.check_read(path, h.as_handle_ref())?;
        let (attrs, _) = tag_info(h.as_handle_ref())?;
        Ok((
            self.host.join(&e.rel),
            attrs & FILE_ATTRIBUTE_DIRECTORY != 0,
        ))
    }

    /// Opens a directory for listing (symlinks followed within the root): the
    /// start of a walk for find and grep. Refused as `read_dir` would be.
    pub fn open_dir(&self, path: &Path) -> Result<crate::walk::DirHandle> {
        named("scandir", path, || {
            self.check_read_given(path)?;
            let e = self.resolve(path, false)?;
            let dir = self
                .open_entry(&e, DIR_ACCESS, DIR_OPTIONS)
                .map_err(|err| match err.errno() {
                    Some(libc::EISDIR) => Error::os(libc::ENOTDIR),
                    _ => err,
                })?;
            self.check_read(path, dir.as_handle_ref())?;
            crate::walk::DirHandle::new(dir).map_err(io_error)
        })
    }

    /// Names in a directory, in the order the system lists them.
    pub fn read_dir(&self, path: &Path) -> Result<Vec<OsString>> {
        Ok(self.read_dir_upto(path, usize::MAX)?.unwrap_or_default())
    }

    /// The directory's entry names if it has at most `max` entries, else
    /// `None` (having read no more than a listing buffer past `max`).
    pub fn read_dir_upto(&self, path: &Path, max: usize) -> Result<Option<Vec<OsString>>> {
        named("scandir", path, || {
            self.check_read_given(path)?;
            let e = self.resolve(path, false)?;
            let dir = self
                .open_entry(&e, DIR_ACCESS, DIR_OPTIONS)
                .map_err(|err| match err.errno() {
                    Some(libc::EISDIR) => Error::os(libc::ENOTDIR),
                    _ => err,
                })?;
            let Some(policy) = self.read_rules() else {
                return list(dir.as_handle_ref(), max, |_, _| true);
            };
            self.check_read(path, dir.as_handle_ref())?;
            // Where the directory is, as given and as reached: an entry denied
            // under either is left out (of the count too).
            let given = self.lexical(path)?;
            let real = self.reached(dir.as_handle_ref())?;
            list(dir.as_handle_ref(), max, |name, attrs| {
                let name = name.to_string_lossy();
                let is_dir = attrs & FILE_ATTRIBUTE_DIRECTORY != 0;
                // The directory is allowed (it was opened), so the entry alone decides.
                let denied = |dir: &str| {
                    policy
                        .read_denial_entry(Path::new(&join_rel(dir, &name)), is_dir)
                        .is_some()
                };
                if denied(&given) || denied(&real) {
                    return false;
                }
                // A link is listed as what it leads to: one to a denied path is left out.
                attrs & FILE_ATTRIBUTE_REPARSE_POINT == 0
                    || !self
                        .stat(&path.join(&*name))
                        .is_err_and(|e| e.kind() == ErrorKind::Protected)
            })
        })
    }

    /// Creates the directory and its missing parents, never outside the root.
    pub fn mkdir_all(&self, path: &Path) -> Result<()> {
        named("mkdir", path, || {
            // One that exists already is no write and passes; else the path as
            // given is asked, and each directory created where it is made.
            if let Some(policy) = self.write_rules() {
                if !matches!(self.resolve(path, false), Ok(e) if e.name == ".") {
                    refuse_write(policy, &self.lexical(path)?, true)?;
                }
            }
            let e = self.resolve(path, true)?;
            // The walk stops on the last component when it is not a directory.
            if e.name != "." {
                return Err(Error::os(libc::EEXIST));
            }
            Ok(())
        })
    }

    /// Replaces the file's content atomically: the data goes to a temporary
    /// file in the same directory, which is renamed over the target relative
    /// to the directory's handle (`FileRenameInfo` with `RootDirectory`, the
    /// handle-relative form of `MoveFileExW(MOVEFILE_REPLACE_EXISTING)`). A
    /// link is written through; an existing file keeps its attributes (hidden,
    /// system, archive); a read-only one is refused with `EPERM`, as Node's
    /// own write is. The parent directory must exist. Under wine the file is
    /// rewritten in place instead (see [`overwrite`](Self::overwrite)).
    pub fn write_file(&self, path: &Path, data: &[u8]) -> Result<()> {
        named("open", path, || self.replace(path, data))
    }

    fn replace(&self, path: &Path, data: &[u8]) -> Result<()> {
        self.replace_at(path, data, true)
    }

    fn replace_at(&self, path: &Path, data: &[u8], follow: bool) -> Result<()> {
        if let Some(policy) = self.write_rules() {
            refuse_write(policy, &self.lexical(path)?, false)?;
        }
        let e = self.resolve(path, false)?;
        if e.name == "." {
            return Err(Error::os(libc::EISDIR));
        }
        self.check_write(path, &e)?;
        let parent = e.parent.as_handle_ref();
        let mut name = wide(&e.name);
        let kept = match nt_open(parent, &name, PROBE_ACCESS, FILE_OPEN, 0, SHARE_ALL) {
            Ok(h) => {
                // A name the filesystem itself resolves elsewhere in the root (wine's
                // unix symlinks, an 8.3 short name; resolve refused any that lead
                // out) is written through, as a link is: the file at its final path
                // is replaced, under its own name (its case kept too).
                let at = final_path(h.as_handle_ref())
                    .ok()
                    .and_then(|p| normalize(&p));
                let parent_at = final_path(parent).ok().and_then(|p| normalize(&p));
                if let (Some(at), Some(parent_at)) = (at, parent_at) {
                    match strip_prefix_ci(&at, &parent_at) {
                        Some(own) if !own.is_empty() && !own.contains('\\') => name = wide(own),
                        _ if follow => {
                            drop(h);
                            return self.replace_at(Path::new(&at), data, false);
                        }
                        _ => {}
                    }
                    if follow && !eq_ci(&String::from_utf16_lossy(&name), &e.name) {
                        drop(h);
                        return self.replace_at(Path::new(&at), data, false);
                    }
                }
                let (attrs, _) = tag_info(h.as_handle_ref())?;
                if attrs & FILE_ATTRIBUTE_DIRECTORY != 0 {
                    return Err(Error::os(libc::EISDIR));
                }
                if attrs & FILE_ATTRIBUTE_READONLY != 0 {
                    return Err(Error::os(libc::EPERM));
                }
                attrs & KEPT_ATTRIBUTES
            }
            Err(s) if is_not_found(s) => 0,
            Err(s) => return Err(nt_error(s)),
        };
        let attrs = if kept == 0 {
            FILE_ATTRIBUTE_NORMAL
        } else {
            kept
        };
        if under_wine() {
            return self.overwrite(parent, &name, data, attrs);
        }
        let tmp = wide(&temp_name());
        let h = nt_open(
            parent,
            &tmp,
            FILE_GENERIC_WRITE | DELETE,
            FILE_CREATE,
            FILE_NON_DIRECTORY_FILE,
            attrs,
        )
        .map_err(nt_error)?;
        let mut file = File::from(h);
        let written = file
            .write_all(data)
            .map_err(io_error)
            .and_then(|()| rename_to(file.as_handle_ref(), parent, &name));
        if written.is_err() {
            let _ = delete_on_close(file.as_handle_ref());
        }
        written
    }

    /// Under wine, the write [`replace_at`](Self::replace_at) makes in place:
    /// wine's server renames by the path names it keeps for each handle, not
    /// relative to the directory's descriptor, so a directory swapped for a
    /// link out between our check and the rename would carry the rename out
    /// (seen: a file made outside in half the runs of the exchange test).
    /// Opens and creates are relative to the descriptor, and what follows goes
    /// through the file's own handle: the file is opened (or made) in the
    /// checked directory, checked, then truncated and written, as Node writes.
    fn overwrite(
        &self,
        dir: BorrowedHandle<'_>,
        name: &[u16],
        data: &[u8],
        attrs: u32,
    ) -> Result<()> {
        let h = nt_open(
            dir,
            name,
            FILE_GENERIC_WRITE,
            FILE_OPEN_IF,
            FILE_NON_DIRECTORY_FILE,
            attrs,
        )
        .map_err(nt_error)?;
        // Nothing is cut before the file is known to be inside.
        self.check_inside(h.as_handle_ref())?;
        let mut file = File::from(h);
        file.set_len(0).map_err(io_error)?;
        file.write_all(data).map_err(io_error)
    }
}

/// Node's `mtimeMs` of a FILETIME, computed as Node computes it from libuv's
/// seconds and nanoseconds (so the float is the same to the last bit).
fn mtime_ms(filetime: i64) -> f64 {
    let since_epoch = filetime - EPOCH_DIFF_100NS;
    let (sec, nsec) = (
        since_epoch.div_euclid(10_000_000),
        since_epoch.rem_euclid(10_000_000) * 100,
    );
    sec as f64 * 1e3 + nsec as f64 / 1e6
}

/// `S_IFDIR` and `S_IFREG` as libuv reports them on Windows.
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;

/// Attributes a replaced file keeps (a read-only one is refused instead).
const KEPT_ATTRIBUTES: u32 = FILE_ATTRIBUTE_HIDDEN
    | FILE_ATTRIBUTE_SYSTEM
    | FILE_ATTRIBUTE_ARCHIVE
    | FILE_ATTRIBUTE_NOT_CONTENT_INDEXED;

/// What a probe of a name opens it with: enough to read its attributes and
/// reparse data, nothing that conflicts with another process's open.
pub(crate) const PROBE_ACCESS: u32 = FILE_READ_ATTRIBUTES | SYNCHRONIZE;
/// A directory walked through or listed.
pub(crate) const DIR_ACCESS: u32 =
    FILE_LIST_DIRECTORY | FILE_TRAVERSE | FILE_READ_ATTRIBUTES | SYNCHRONIZE;
pub(crate) const DIR_OPTIONS: u32 = FILE_DIRECTORY_FILE;
pub(crate) const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;

/// Runs `op`, naming the system call and the path in its error as Node on
/// Windows does: a system error's path with `\` separators, a refusal's as given.
fn named<T>(syscall: &'static str, path: &Path, op: impl FnOnce() -> Result<T>) -> Result<T> {
    op().map_err(|e| match e.kind() {
        ErrorKind::Os => {
            let shown = path.to_string_lossy().replace('/', "\\");
            e.at(syscall, Path::new(&shown))
        }
        _ => e.at(syscall, path),
    })
}

/// A name for a temporary file, unique in this process and across processes.
fn temp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".pi-native-ops-{}-{n}.tmp", std::process::id())
}

pub(crate) fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

/// Puts the components of a `\`-separated relative path in front of the walk.
fn push_front_components(pending: &mut VecDeque<String>, rel: &str) {
    for c in rel.split(['\\', '/']).rev() {
        if !c.is_empty() && c != "." {
            pending.push_front(c.to_string());
        }
    }
}

/// Refuses a name Win32 would read as something else than the filesystem
/// does (see the module's notes), with `EINVAL`.
fn check_name(name: &str) -> Result<()> {
    let invalid = || Err(Error::os(libc::EINVAL));
    // Node on Windows answers an over-long name with ENOENT (ERROR_INVALID_NAME).
    if name.encode_utf16().count() > MAX_COMPONENT_UNITS {
        return Err(Error::os(libc::ENOENT));
    }
    if name
        .chars()
        .any(|c| c < ' ' || matches!(c, ':' | '<' | '>' | '"' | '|' | '?' | '*'))
    {
        return invalid();
    }
    if name.ends_with('.') || name.ends_with(' ') {
        return invalid();
    }
    // `nul.txt` and `COM1 .log` name the device too.
    let base = name.split('.').next().unwrap_or(name).trim_end_matches(' ');
    let base = base.to_ascii_uppercase();
    let device = match base.as_str() {
        "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$" => true,
        b if b.len() == 4 && (b.starts_with("COM") || b.starts_with("LPT")) => {
            b.as_bytes()[3].is_ascii_digit()
        }
        b => {
            (b.starts_with("COM") || b.starts_with("LPT"))
                && matches!(&b[3..], "\u{b9}" | "\u{b2}" | "\u{b3}")
        }
    };
    if device {
        return invalid();
    }
    Ok(())
}

pub(crate) fn is_link(attrs: u32, tag: u32) -> bool {
    attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 && (tag == TAG_SYMLINK || tag == TAG_MOUNT_POINT)
}

fn is_not_found(status: i32) -> bool {
    status == STATUS_OBJECT_NAME_NOT_FOUND || status == STATUS_OBJECT_PATH_NOT_FOUND
}

/// Opens `name` relative to the directory `dir` (an empty name: `dir`
/// itself), never following a reparse point, for synchronous I/O.
pub(crate) fn nt_open(
    dir: BorrowedHandle<'_>,
    name: &[u16],
    access: u32,
    disposition: u32,
    options: u32,
    attributes: u32,
) -> std::result::Result<OwnedHandle, i32> {
    // STATUS_OBJECT_NAME_INVALID: a name too long for a UNICODE_STRING.
    const STATUS_OBJECT_NAME_INVALID: i32 = 0xC000_0033_u32 as i32;
    if name.len() > MAX_NAME_UNITS {
        return Err(STATUS_OBJECT_NAME_INVALID);
    }
    let bytes = (name.len() * 2) as u16;
    let object_name = UNICODE_STRING {
        Length: bytes,
        MaximumLength: bytes,
        Buffer: name.as_ptr() as *mut u16,
    };
    let attrs = OBJECT_ATTRIBUTES {
        Length: std::mem::size_of::<OBJECT_ATTRIBUTES>() as u32,
        RootDirectory: dir.as_raw_handle() as HANDLE,
        ObjectName: &object_name,
        Attributes: OBJ_CASE_INSENSITIVE,
        SecurityDescriptor: std::ptr::null(),
        SecurityQualityOfService: std::ptr::null(),
    };
    let mut handle: HANDLE = std::ptr::null_mut();
    // SAFETY: an all-zero IO_STATUS_BLOCK is a valid value (integers and a pointer-sized union).
    let mut status_block: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    let share = if options & FILE_DIRECTORY_FILE != 0 && access == DIR_ACCESS {
        // A directory we walk through cannot be renamed away meanwhile.
        FILE_SHARE_READ | FILE_SHARE_WRITE
    } else {
        SHARE_ALL
    };
    // SAFETY: every pointer is to a live local (the name outlives the call); `dir` is a
    // handle we hold; NtCreateFile writes only `handle` and `status_block`.
    let status = unsafe {
        NtCreateFile(
            &mut handle,
            access | SYNCHRONIZE,
            &attrs,
            &mut status_block,
            std::ptr::null(),
            attributes,
            share,
            disposition,
            options
                | FILE_OPEN_REPARSE_POINT
                | FILE_SYNCHRONOUS_IO_NONALERT
                | FILE_OPEN_FOR_BACKUP_INTENT,
            std::ptr::null(),
            0,
        )
    };
    if status < 0 {
        return Err(status);
    }
    // SAFETY: NtCreateFile succeeded, so `handle` is a new handle that we own.
    Ok(unsafe { OwnedHandle::from_raw_handle(handle as _) })
}

fn open_dir(dir: BorrowedHandle<'_>, name: &[u16]) -> std::result::Result<OwnedHandle, i32> {
    nt_open(dir, name, DIR_ACCESS, FILE_OPEN, DIR_OPTIONS, 0)
}

fn create_dir(dir: BorrowedHandle<'_>, name: &[u16]) -> Result<()> {
    match nt_open(dir, name, DIR_ACCESS, FILE_CREATE, DIR_OPTIONS, 0) {
        Ok(_) => Ok(()),
        Err(STATUS_OBJECT_NAME_COLLISION) => Ok(()),
        Err(s) => Err(nt_error(s)),
    }
}

/// The attributes and reparse tag of an open handle.
pub(crate) fn tag_info(h: BorrowedHandle<'_>) -> Result<(u32, u32)> {
    let info: FILE_ATTRIBUTE_TAG_INFO = file_info(h, FileAttributeTagInfo)?;
    Ok((info.FileAttributes, info.ReparseTag))
}

/// One fixed-size `GetFileInformationByHandleEx` record.
fn file_info<T: Copy>(h: BorrowedHandle<'_>, class: i32) -> Result<T> {
    let mut out = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: `out` is writable for size_of::<T>() bytes, the size passed; `class` is the
    // information class whose record is `T` (each caller pairs them).
    let ok = unsafe {
        GetFileInformationByHandleEx(
            h.as_raw_handle() as HANDLE,
            class,
            out.as_mut_ptr().cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if ok == 0 {
        return Err(io_error(io::Error::last_os_error()));
    }
    // SAFETY: the call succeeded and filled the record (zeroed before, so any part it left
    // is a valid zero for these plain integer records).
    Ok(unsafe { out.assume_init() })
}

/// The handle's final path (`\\?\C:\…`), as the filesystem resolved it.
pub(crate) fn final_path(h: BorrowedHandle<'_>) -> Result<OsString> {
    // Room for the longest path Windows has (32767 units) on the second try.
    let mut buf = vec![0u16; 512];
    loop {
        // SAFETY: `buf` is writable for `buf.len()` units, the length passed.
        let n = unsafe {
            GetFinalPathNameByHandleW(
                h.as_raw_handle() as HANDLE,
                buf.as_mut_ptr(),
                buf.len() as u32,
                0,
            )
        } as usize;
        if n == 0 {
            return Err(io_error(io::Error::last_os_error()));
        }
        if n < buf.len() {
            return Ok(OsString::from_wide(&buf[..n]));
        }
        if buf.len() > MAX_NAME_UNITS {
            return Err(Error::os(libc::ENAMETOOLONG));
        }
        buf.resize(n + 1, 0);
    }
}

/// Where a symlink or junction points.
enum Target {
    /// `C:\x`, `\\server\share\x` (junctions are always absolute).
    Absolute(String),
    /// Relative to the link's directory.
    Relative(String),
    /// `\x`: rooted on the link's own drive.
    Rooted(String),
}

fn reparse_target(h: BorrowedHandle<'_>) -> Result<Target> {
    let mut buf = vec![0u8; REPARSE_BUFFER_BYTES];
    let mut returned = 0u32;
    // SAFETY: `buf` is writable for its length, which is passed; `returned` is a live local.
    let ok = unsafe {
        DeviceIoControl(
            h.as_raw_handle() as HANDLE,
            FSCTL_GET_REPARSE_POINT,
            std::ptr::null(),
            0,
            buf.as_mut_ptr().cast(),
            buf.len() as u32,
            &mut returned,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io_error(io::Error::last_os_error()));
    }
    parse_reparse(&buf[..(returned as usize).min(buf.len())]).ok_or_else(Error::outside)
}

/// Reads a symlink's or junction's substitute name from its reparse data
/// (`REPARSE_DATA_BUFFER`), bounds-checked; `None` for anything malformed.
fn parse_reparse(data: &[u8]) -> Option<Target> {
    let u16_at = |i: usize| Some(u16::from_le_bytes(data.get(i..i + 2)?.try_into().ok()?));
    let u32_at = |i: usize| Some(u32::from_le_bytes(data.get(i..i + 4)?.try_into().ok()?));
    let tag = u32_at(0)?;
    let (path_start, flags) = match tag {
        TAG_SYMLINK => (20, u32_at(16)?),
        TAG_MOUNT_POINT => (16, 0),
        _ => return None,
    };
    let offset = path_start + u16_at(8)? as usize;
    let len = u16_at(10)? as usize;
    let bytes = data.get(offset..offset + len)?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let target = String::from_utf16(&units).ok()?;
    if tag == TAG_SYMLINK && flags & SYMLINK_FLAG_RELATIVE != 0 {
        return Some(if target.starts_with('\\') {
            Target::Rooted(target)
        } else {
            Target::Relative(target)
        });
    }
    Some(Target::Absolute(target))
}

/// Lists a directory handle: the names, or `None` past `max`.
/// The names in `dir` that `keep` (given each name and its attributes)
/// keeps, or `None` past `max` of them.
fn list(
    dir: BorrowedHandle<'_>,
    max: usize,
    mut keep: impl FnMut(&OsStr, u32) -> bool,
) -> Result<Option<Vec<OsString>>> {
    let mut names = Vec::new();
    let mut over = false;
    for_each_entry(dir, |units, attrs, _| {
        let name = OsString::from_wide(units);
        if keep(&name, attrs) {
            if names.len() == max {
                over = true;
                return false;
            }
            names.push(name);
        }
        true
    })?;
    Ok((!over).then_some(names))
}

/// Calls `each` with every entry of `dir` (but `.` and `..`): its name, its
/// attributes and its reparse tag (0 when it is no reparse point), until
/// `each` returns `false`. `FileFullDirectoryInfo` through the handle, so no
/// path is looked up again.
pub(crate) fn for_each_entry(
    dir: BorrowedHandle<'_>,
    each: impl FnMut(&[u16], u32, u32) -> bool,
) -> Result<()> {
    list_entries(dir, None, each)
}

/// [`for_each_entry`] for the directory `dir`, opened by name in the
/// directory whose identity is `parent` and not checked since: under wine,
/// [`verify_child`]'s check made by the listing itself (wine lists `.` and
/// `..` first, with their file IDs), so no second handle is needed. Unless
/// `..` is `parent` and comes before every other entry, no entry is given
/// and the directory is refused. Elsewhere the same as [`for_each_entry`].
pub(crate) fn for_each_child_entry(
    dir: BorrowedHandle<'_>,
    parent: DirKey,
    each: impl FnMut(&[u16], u32, u32) -> bool,
) -> Result<()> {
    list_entries(dir, under_wine().then_some(parent), each)
}

/// [`for_each_entry`], checking the `..` of `dir` against `parent` when given
/// (then with `FileIdFullDirectoryInformation`, which has the file IDs).
fn list_entries(
    dir: BorrowedHandle<'_>,
    parent: Option<DirKey>,
    mut each: impl FnMut(&[u16], u32, u32) -> bool,
) -> Result<()> {
    // u64s: the records are 8-byte aligned within the buffer.
    let mut buf = vec![0u64; LIST_BUFFER_BYTES / 8];
    let mut units: Vec<u16> = Vec::new();
    let with_ids = parent.is_some();
    // Until `..` has shown to be `parent`, no entry is given.
    let mut unchecked = parent;
    let mut first = true;
    loop {
        let more = if with_ids {
            list_ids(dir, &mut buf, first)?
        } else {
            list_full(dir, &mut buf, first)?
        };
        if !more {
            return match unchecked {
                None => Ok(()),
                Some(_) => Err(Error::outside()),
            };
        }
        first = false;
        // SAFETY: viewing the u64 buffer as bytes (same memory, u8 has no alignment need).
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), LIST_BUFFER_BYTES) };
        let mut at = 0usize;
        loop {
            // FILE_FULL_DIR_INFO and FILE_ID_FULL_DIR_INFORMATION alike:
            // NextEntryOffset at 0, FileAttributes at 56, FileNameLength at
            // 60, EaSize at 64 (a reparse point's tag); then FileName at 68,
            // or the FileId at 72 and FileName at 80.
            let field = |i: usize| -> Option<u32> {
                Some(u32::from_le_bytes(
                    bytes.get(at + i..at + i + 4)?.try_into().ok()?,
                ))
            };
            let (Some(next), Some(attrs), Some(len), Some(ea)) =
                (field(0), field(56), field(60), field(64))
            else {
                return Err(Error::os(libc::EIO));
            };
            let name_at = at + if with_ids { 80 } else { 68 };
            let Some(raw) = bytes.get(name_at..name_at + len as usize) else {
                return Err(Error::os(libc::EIO));
            };
            units.clear();
            units.extend(
                raw.chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]])),
            );
            let dot = units == [b'.' as u16];
            let dotdot = units == [b'.' as u16, b'.' as u16];
            if let Some(parent) = unchecked {
                let id = bytes
                    .get(at + 72..at + 80)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes);
                if dotdot && id == Some(parent.0) {
                    unchecked = None;
                } else if !dot {
                    return Err(Error::outside());
                }
            } else if !dot && !dotdot {
                let tag = if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
                    ea
                } else {
                    0
                };
                if !each(&units, attrs, tag) {
                    return Ok(());
                }
            }
            if next == 0 {
                break;
            }
            at += next as usize;
        }
    }
}

/// Fills `buf` with the next `FILE_FULL_DIR_INFO` records of `dir` (from the
/// start when `first`); `false` once the listing has ended.
fn list_full(dir: BorrowedHandle<'_>, buf: &mut [u64], first: bool) -> Result<bool> {
    let class = if first {
        FileFullDirectoryRestartInfo
    } else {
        FileFullDirectoryInfo
    };
    // SAFETY: `buf` is writable for its size in bytes, the length passed.
    let ok = unsafe {
        GetFileInformationByHandleEx(
            dir.as_raw_handle() as HANDLE,
            class,
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(buf) as u32,
        )
    };
    if ok == 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(ERROR_NO_MORE_FILES) {
            return Ok(false);
        }
        return Err(io_error(e));
    }
    Ok(true)
}

/// [`list_full`] with `FILE_ID_FULL_DIR_INFORMATION` records
/// (`NtQueryDirectoryFile`: no Win32 class has them).
fn list_ids(dir: BorrowedHandle<'_>, buf: &mut [u64], first: bool) -> Result<bool> {
    // SAFETY: an all-zero IO_STATUS_BLOCK is a valid value.
    let mut status_block: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    // SAFETY: `buf` is writable for its size in bytes, the length passed; no event or APC is
    // given and the handle is synchronous (`nt_open`), so the call has completed when it returns.
    let status = unsafe {
        NtQueryDirectoryFile(
            dir.as_raw_handle() as HANDLE,
            std::ptr::null_mut(),
            None,
            std::ptr::null(),
            &mut status_block,
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(buf) as u32,
            FileIdFullDirectoryInformation,
            false,
            std::ptr::null(),
            first,
        )
    };
    if status == STATUS_NO_MORE_FILES {
        return Ok(false);
    }
    if status < 0 {
        return Err(nt_error(status));
    }
    Ok(true)
}

/// Renames the open file `h` to `name` in `dir`, replacing what is there:
/// `NtSetInformationFile(FileRenameInformation)` with the directory's handle
/// as `RootDirectory` (kernelbase's `SetFileInformationByHandle` turns the
/// name into a path from the current directory first, under wine at least).
fn rename_to(h: BorrowedHandle<'_>, dir: BorrowedHandle<'_>, name: &[u16]) -> Result<()> {
    let header = std::mem::offset_of!(FILE_RENAME_INFORMATION, FileName);
    let size = header + (name.len() + 1) * 2;
    // u64s: FILE_RENAME_INFORMATION holds a handle, so it is 8-byte aligned.
    let mut buf = vec![0u64; size.div_ceil(8)];
    let info = buf.as_mut_ptr().cast::<FILE_RENAME_INFORMATION>();
    // SAFETY: `buf` is at least `size` bytes, aligned for FILE_RENAME_INFORMATION; the name is
    // copied into the tail after the header, whose room `size` counted (a NUL left zero).
    unsafe {
        (*info).Anonymous.ReplaceIfExists = true;
        (*info).RootDirectory = dir.as_raw_handle() as HANDLE;
        (*info).FileNameLength = (name.len() * 2) as u32;
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            buf.as_mut_ptr().cast::<u8>().add(header).cast::<u16>(),
            name.len(),
        );
    }
    set_information(h, info.cast(), size, FileRenameInformation)
}

/// Marks an open file (a temporary we made) to be deleted when closed.
fn delete_on_close(h: BorrowedHandle<'_>) -> Result<()> {
    // FILE_DISPOSITION_INFORMATION: one BOOLEAN, DeleteFile.
    let delete: u8 = 1;
    set_information(
        h,
        (&delete as *const u8).cast(),
        1,
        FileDispositionInformation,
    )
}

fn set_information(
    h: BorrowedHandle<'_>,
    info: *const std::ffi::c_void,
    size: usize,
    class: i32,
) -> Result<()> {
    // SAFETY: an all-zero IO_STATUS_BLOCK is a valid value.
    let mut status_block: IO_STATUS_BLOCK = unsafe { std::mem::zeroed() };
    // SAFETY: each caller passes a live record of `size` bytes of the class's layout.
    let status = unsafe {
        NtSetInformationFile(
            h.as_raw_handle() as HANDLE,
            &mut status_block,
            info,
            size as u32,
            class,
        )
    };
    if status < 0 {
        return Err(nt_error(status));
    }
    Ok(())
}

/// An NTSTATUS as an error with the errno Node would report.
pub(crate) fn nt_error(status: i32) -> Error {
    use crate::error::win_errno;
    // STATUS_FILE_IS_A_DIRECTORY would read as an access denial.
    const STATUS_FILE_IS_A_DIRECTORY: i32 = 0xC000_00BA_u32 as i32;
    match status {
        STATUS_FILE_IS_A_DIRECTORY => return Error::os(libc::EISDIR),
        STATUS_NOT_A_DIRECTORY => return Error::os(libc::ENOTDIR),
        _ => {}
    }
    // SAFETY: a pure lookup of a number.
    let code = unsafe { RtlNtStatusToDosError(status) };
    Error::os(win_errno(code as i32))
}

fn io_error(e: io::Error) -> Error {
    Error::os(io_errno(&e))
}

/// The errno an I/O error stands for on Windows (its raw code is a Win32 one).
fn io_errno(e: &io::Error) -> i32 {
    crate::error::errno_of(e)
}

/// A borrowed view of a handle we own, for the helpers above.
trait AsHandleRef {
    fn as_handle_ref(&self) -> BorrowedHandle<'_>;
}

impl<T: std::os::windows::io::AsHandle> AsHandleRef for T {
    fn as_handle_ref(&self) -> BorrowedHandle<'_> {
        self.as_handle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_to_one_spelling() {
        let n = |s: &str| normalize(OsStr::new(s));
        assert_eq!(n("c:/ws/a").as_deref(), Some("C:\\ws\\a"));
        assert_eq!(n("\\\\?\\C:\\ws\\").as_deref(), Some("C:\\ws"));
        assert_eq!(
            n("\\\\?\\UNC\\srv\\share\\x").as_deref(),
            Some("\\\\srv\\share\\x")
        );
        assert_eq!(n("C:\\").as_deref(), Some("C:\\"));
        let drive = std::env::current_dir().unwrap().to_str().unwrap()[..2].to_string();
        assert_eq!(n("\\foo\\x"), Some(format!("{drive}\\foo\\x")));
        for relative in ["C:foo", "foo", "\\\\.\\C:\\x", "\\\\?\\GLOBALROOT"] {
            assert_eq!(n(relative), None, "{relative}");
        }
    }

    #[test]
    fn prefixes_compare_case_insensitively_at_a_separator() {
        assert_eq!(strip_prefix_ci("C:\\WS\\a", "C:\\ws"), Some("a"));
        assert_eq!(strip_prefix_ci("C:\\ws", "C:\\ws"), Some(""));
        assert_eq!(strip_prefix_ci("C:\\ws2\\a", "C:\\ws"), None);
        assert_eq!(strip_prefix_ci("C:\\a", "C:\\"), Some("a"));
        assert_eq!(strip_prefix_ci("C:\\ÄB\\x", "C:\\äb"), Some("x"));
    }

    #[test]
    fn names_win32_reads_otherwise_are_refused() {
        for bad in [
            "a.txt:secret",
            "CON",
            "nul.txt",
            "Com1",
            "LPT9.log",
            "aux .c",
            "a.",
            "a ",
            "a?",
            "COM\u{b9}",
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.errno(), Some(libc::EINVAL), "{bad}");
        }
        for good in [
            "CONTRIBUTING.md",
            "con1",
            "COMA",
            "a.b",
            ".git",
            "PROGRA~1",
            "nul_",
        ] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn reparse_data_is_parsed_within_bounds() {
        let mut data = vec![0u8; 20];
        data[..4].copy_from_slice(&TAG_SYMLINK.to_le_bytes());
        let name: Vec<u8> = "..\\x".encode_utf16().flat_map(u16::to_le_bytes).collect();
        data[10..12].copy_from_slice(&(name.len() as u16).to_le_bytes());
        data[16..20].copy_from_slice(&SYMLINK_FLAG_RELATIVE.to_le_bytes());
        data.extend_from_slice(&name);
        assert!(matches!(parse_reparse(&data), Some(Target::Relative(t)) if t == "..\\x"));
        // A length past the end is refused, not read.
        data[10..12].copy_from_slice(&999u16.to_le_bytes());
        assert!(parse_reparse(&data).is_none());
    }

    #[test]
    fn a_root_reads_writes_and_lists_beneath_itself_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path(), Some(Path::new("C:/workspace"))).unwrap();
        root.mkdir_all(Path::new("C:\\workspace\\a\\b")).unwrap();
        root.write_file(Path::new("C:/workspace/a/b/f.txt"), b"one")
            .unwrap();
        root.write_file(Path::new("c:\\WORKSPACE\\A\\b\\F.TXT"), b"two")
            .unwrap();
        assert_eq!(std::fs::read(dir.path().join("a/b/f.txt")).unwrap(), b"two");
        assert_eq!(
            root.read_file(&dir.path().join("a\\b\\f.txt")).unwrap(),
            b"two"
        );
        let names = root.read_dir(Path::new("C:\\workspace\\a\\b")).unwrap();
        assert_eq!(names, [OsString::from("f.txt")]);
        let st = root.stat(Path::new("C:\\workspace\\a\\b\\f.txt")).unwrap();
        assert!(st.is_file && st.size == 3 && st.mode == S_IFREG | 0o666);
        assert!(root.stat(Path::new("C:\\workspace\\a")).unwrap().is_dir);
        let outside = dir.path().parent().unwrap().join("elsewhere.txt");
        for p in [
            "C:\\workspace\\..\\x",
            "C:\\workspace\\a\\..\\..\\x",
            "C:workspace\\x",
            "D:\\workspace\\x",
            "\\\\.\\C:\\workspace\\x",
            outside.to_str().unwrap(),
        ] {
            let e = root.write_file(Path::new(p), b"x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Outside, "{p}");
            assert_eq!(e.to_string(), format!("path \"{p}\" is outside workspace"));
        }
        assert!(!outside.exists());
        let e = root
            .read_file(Path::new("C:\\workspace\\a\\b\\f.txt:s"))
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        let e = root
            .write_file(Path::new("C:\\workspace\\NUL"), b"x")
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        let e = root
            .read_file(Path::new("C:\\workspace\\missing"))
            .unwrap_err();
        assert_eq!(e.code().as_deref(), Some("ENOENT"));
        let e = root.read_file(Path::new("C:\\workspace\\a")).unwrap_err();
        assert_eq!(e.code().as_deref(), Some("EISDIR"));
        let e = root
            .write_file(Path::new("C:\\workspace\\a"), b"x")
            .unwrap_err();
        assert_eq!(e.code().as_deref(), Some("EISDIR"));
        // No temporary file is left behind.
        assert_eq!(
            root.read_dir(Path::new("C:\\workspace")).unwrap(),
            [OsString::from("a")]
        );
    }

    #[test]
    fn a_directory_is_verified_as_a_child_of_the_directory_it_was_opened_in() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a").join("b")).unwrap();
        let root = Root::open(dir.path(), None).unwrap();
        let a = open_dir(root.dir.as_handle_ref(), &wide("a")).unwrap();
        let a_key = verify_child(root.key, a.as_handle_ref(), false).unwrap();
        let b = open_dir(a.as_handle_ref(), &wide("b")).unwrap();
        verify_child(a_key, b.as_handle_ref(), true).unwrap();
        if under_wine() {
            // Asked of the root, `b` is refused: its `..` is `a`, as a directory reached
            // through a link would have its own parent elsewhere.
            let e = verify_child(root.key, b.as_handle_ref(), false).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Outside);
            assert_ne!(a_key, root.key);
        }
    }

    #[test]
    fn a_policy_is_asked_by_names_as_the_filesystem_compares_them() {
        use crate::policy::{Policy, PolicySpec};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), b"SECRET").unwrap();
        std::fs::write(dir.path().join("a.txt"), b"A").unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        let spec = PolicySpec::from_raw(Some(vec![".env".into()]), None, None);
        let root = Root::open(dir.path(), Some(Path::new("C:/workspace")))
            .unwrap()
            .with_policy(Arc::new(Policy::new(&spec).unwrap()));
        assert!(root.policy().is_some());
        for p in [
            "C:\\workspace\\.env",
            "C:\\workspace\\.ENV",
            "C:/workspace/a/../.Env",
        ] {
            let e = root.read_file(Path::new(p)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protected, "{p}");
            assert_eq!(e.rule(), Some(".env"));
            assert_eq!(
                e.to_string(),
                format!("path \"{p}\" is protected by policy")
            );
            assert_eq!(
                root.stat(Path::new(p)).unwrap_err().kind(),
                ErrorKind::Protected
            );
            assert_eq!(
                root.exists_inside(Path::new(p)).unwrap_err().kind(),
                ErrorKind::Protected
            );
        }
        let names = root.read_dir(Path::new("C:\\workspace")).unwrap();
        assert!(
            !names.iter().any(|n| n.eq_ignore_ascii_case(".env")),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n == "a.txt"), "{names:?}");
        // The protected defaults: a hook is neither written nor its directory made.
        for p in [
            "C:\\workspace\\.git\\hooks\\x",
            "C:\\workspace\\.GIT\\Hooks\\x",
        ] {
            let e = root.write_file(Path::new(p), b"x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protected, "{p}");
        }
        let e = root
            .mkdir_all(Path::new("C:\\workspace\\.git\\HOOKS\\d"))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protected);
        assert_eq!(
            std::fs::read_dir(dir.path().join(".git/hooks"))
                .unwrap()
                .count(),
            0
        );
        root.write_file(Path::new("C:\\workspace\\a.txt"), b"B")
            .unwrap();
        assert_eq!(
            root.read_file(Path::new("C:/workspace/A.TXT")).unwrap(),
            b"B"
        );
    }
}
