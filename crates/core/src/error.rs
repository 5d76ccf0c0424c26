//! The core's one error type: what failed, as data (a kind, and the errno,
//! system call and path when there are ones), with `Display` giving the exact
//! message a user or the model reads.
//!
//! Messages follow the tools being emulated, byte for byte: Node's
//! `ENOENT: no such file or directory, open '/x'`, pi's
//! `path "/x" is outside workspace` and `Path not found: /x`, ripgrep's
//! `rg: regex parse error: …`, Node's `spawn /bin/sh ENOENT`. A face turns the
//! data into its own shape (the napi binding: a Node-style `Error` with `code`,
//! `errno`, `syscall`, `path`) without reading the message back.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The path, symlinks resolved, leaves the workspace root. A refusal, not
    /// a system error: it has no errno, so faces give it no error code.
    Outside,
    /// A system call failed: errno, and the call and path when known.
    Os,
    /// The workspace root itself cannot be opened (errno and path).
    RootUnavailable,
    /// A glob does not parse (find's pattern or ignore globs, grep's `glob`).
    InvalidGlob,
    /// grep's regex does not compile.
    InvalidRegex,
    /// grep's search path does not exist (pi's wording).
    PathNotFound,
    /// The shell could not be started (errno; the shell is the path).
    Spawn,
    /// The caller cancelled the operation.
    Aborted,
    /// A sandboxed exec cannot be sandboxed (no usable mode, an invalid
    /// sandbox spec, or a setup step the kernel refused). Never run unsandboxed
    /// instead: the text says why and what to do. Code `ESANDBOX`, no errno.
    SandboxUnavailable,
    /// A whole-file read of more than [`MAX_READ_BYTES`]: Node's
    /// `ERR_FS_FILE_TOO_LARGE` (a `RangeError`), no errno.
    FileTooLarge,
    /// exec's custom shell does not exist (pi's bash wording, no code).
    ShellNotFound,
    /// exec's working directory does not exist (pi's wording, naming the
    /// shell: `bash` or `PowerShell`; no code).
    WorkingDirectory,
    /// No shell to run was found (pi's Windows wording: where it looked and
    /// what to do); the text is the whole message, no code.
    NoShell,
    /// The workspace policy refuses the access (`crate::policy`): a refusal
    /// like [`ErrorKind::Outside`], no errno and no code (pi's edit tool shows
    /// the model an error's code instead of its message when it has one);
    /// [`Error::rule`] names the rule.
    Protected,
}

/// The most bytes a whole-file read returns: Node's `kIoMaxLength`
/// (2^31 - 1), past which its `fs.readFile` refuses a file with
/// `ERR_FS_FILE_TOO_LARGE` (Node 20 and 22 alike).
pub const MAX_READ_BYTES: u64 = (1 << 31) - 1;

/// The message of `ErrorKind::Aborted` (pi's, for a cancelled tool call); the faces throw it too
/// for a call cancelled before it reached the core.
pub const ABORTED_MESSAGE: &str = "Operation aborted";

/// A failure of a core operation.
///
/// ```
/// use std::path::Path;
/// use pi_native_ops_core::{Error, ErrorKind};
///
/// let e = Error::os(2).at("open", Path::new("/w/missing.txt"));
/// assert_eq!(e.kind(), ErrorKind::Os);
/// assert_eq!(e.code().as_deref(), Some("ENOENT"));
/// assert_eq!(e.to_string(), "ENOENT: no such file or directory, open '/w/missing.txt'");
/// assert_eq!(Error::path_not_found(Path::new("/w/x")).to_string(), "Path not found: /w/x");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    errno: Option<i32>,
    syscall: Option<Cow<'static, str>>,
    path: Option<PathBuf>,
    /// The whole message of a pattern error, worded as the emulated tool
    /// words it (fd's glob text for find, ripgrep's `rg: …` for grep).
    text: Option<String>,
    /// The shell a working-directory refusal names, as pi names it.
    shell_name: Option<&'static str>,
}

/// The core's result: every fallible call fails with an `Error`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn new(kind: ErrorKind) -> Error {
        Error {
            kind,
            errno: None,
            syscall: None,
            path: None,
            text: None,
            shell_name: None,
        }
    }

    /// The refusal of a path leaving the root; [`Error::at`] names the path.
    pub fn outside() -> Error {
        Error::new(ErrorKind::Outside)
    }

    /// The policy's refusal of a path (`rule` as given); [`Error::at`] names the path.
    pub fn protected(rule: impl Into<String>) -> Error {
        Error {
            text: Some(rule.into()),
            ..Error::new(ErrorKind::Protected)
        }
    }

    /// The policy rule that refused the access, for [`ErrorKind::Protected`].
    pub fn rule(&self) -> Option<&str> {
        match self.kind {
            ErrorKind::Protected => self.text.as_deref(),
            _ => None,
        }
    }

    /// A failed system call (`errno` as the OS reports it, positive);
    /// [`Error::at`] names the call and path.
    pub fn os(errno: i32) -> Error {
        Error {
            errno: Some(errno),
            ..Error::new(ErrorKind::Os)
        }
    }

    /// A failed read of an opened file: Node names no path for these
    /// (`EIO: i/o error, read`).
    pub fn read(errno: i32) -> Error {
        Error {
            syscall: Some(Cow::Borrowed("read")),
            ..Error::os(errno)
        }
    }

    /// The workspace root `path` cannot be opened.
    pub fn root_unavailable(path: &Path, errno: i32) -> Error {
        Error {
            errno: Some(errno),
            path: Some(path.to_path_buf()),
            ..Error::new(ErrorKind::RootUnavailable)
        }
    }

    /// A glob that does not parse; `text` is the whole message.
    pub fn invalid_glob(text: impl Into<String>) -> Error {
        Error {
            text: Some(text.into()),
            ..Error::new(ErrorKind::InvalidGlob)
        }
    }

    /// A regex that does not compile; `text` is the whole message.
    pub fn invalid_regex(text: impl Into<String>) -> Error {
        Error {
            text: Some(text.into()),
            ..Error::new(ErrorKind::InvalidRegex)
        }
    }

    /// grep's search path `path` does not exist.
    pub fn path_not_found(path: &Path) -> Error {
        Error {
            path: Some(path.to_path_buf()),
            ..Error::new(ErrorKind::PathNotFound)
        }
    }

    /// Starting `shell` failed with `errno`. Node names the call `spawn <shell>`.
    pub fn spawn(shell: &str, errno: i32) -> Error {
        Error {
            errno: Some(errno),
            syscall: Some(Cow::Owned(format!("spawn {shell}"))),
            path: Some(PathBuf::from(shell)),
            ..Error::new(ErrorKind::Spawn)
        }
    }

    /// The operation was cancelled (pi's abort signal).
    pub fn aborted() -> Error {
        Error::new(ErrorKind::Aborted)
    }

    /// A sandbox that cannot be set up; `why` says why and what to do.
    pub fn sandbox_unavailable(why: impl Into<String>) -> Error {
        Error {
            text: Some(why.into()),
            ..Error::new(ErrorKind::SandboxUnavailable)
        }
    }

    /// A file of `size` bytes (as its `fstat` claims, or as many as were read
    /// before the read passed [`MAX_READ_BYTES`]) is too large to read whole.
    pub fn file_too_large(size: u64) -> Error {
        // Node's words (`ERR_FS_FILE_TOO_LARGE` in lib/internal/errors.js).
        Error {
            text: Some(format!("File size ({size}) is greater than 2 GiB")),
            ..Error::new(ErrorKind::FileTooLarge)
        }
    }

    /// A whole-file read of `size` bytes past `max`, the most a face carries in one answer (the
    /// remote protocol's frame), below Node's own bound: the same kind and code as Node's refusal.
    pub fn file_too_large_to_carry(size: u64, max: u64) -> Error {
        Error {
            text: Some(format!(
                "File size ({size}) is greater than {max} bytes, the most one answer carries"
            )),
            ..Error::new(ErrorKind::FileTooLarge)
        }
    }

    /// pi's refusal of a custom shell `shell` that does not exist.
    pub fn shell_not_found(shell: &str) -> Error {
        Error {
            text: Some(shell.to_string()),
            ..Error::new(ErrorKind::ShellNotFound)
        }
    }

    /// pi's refusal of an exec whose working directory `cwd` (as the caller
    /// gave it) does not exist.
    pub fn working_directory(cwd: &str) -> Error {
        Error::working_directory_of(cwd, "bash")
    }

    /// pi's refusal of an exec whose working directory `cwd` does not exist,
    /// for the shell pi names `shell_name` (`bash`, `PowerShell`).
    pub fn working_directory_of(cwd: &str, shell_name: &'static str) -> Error {
        Error {
            text: Some(cwd.to_string()),
            shell_name: Some(shell_name),
            ..Error::new(ErrorKind::WorkingDirectory)
        }
    }

    /// No shell was found; `text` is pi's whole message.
    pub fn no_shell(text: impl Into<String>) -> Error {
        Error {
            text: Some(text.into()),
            ..Error::new(ErrorKind::NoShell)
        }
    }

    /// Names the call and the path (as the caller gave it) an OS error or a
    /// refusal came from, unless it already names its own: an error keeps the
    /// innermost context, so `read` on an opened file stays path-less.
    pub fn at(mut self, syscall: &'static str, path: &Path) -> Error {
        match self.kind {
            ErrorKind::Os if self.syscall.is_none() => {
                self.syscall = Some(Cow::Borrowed(syscall));
                self.path = Some(path.to_path_buf());
            }
            ErrorKind::Outside | ErrorKind::Protected if self.path.is_none() => {
                self.path = Some(path.to_path_buf())
            }
            _ => {}
        }
        self
    }

    /// The same failure reported under `path`: for an operation on a path the
    /// caller derived from the one it was given (a resolved directory), which
    /// must be reported as given.
    pub fn with_path(mut self, path: &Path) -> Error {
        if self.path.is_some()
            && matches!(
                self.kind,
                ErrorKind::Os | ErrorKind::Outside | ErrorKind::Protected
            )
        {
            self.path = Some(path.to_path_buf());
        }
        self
    }

    /// What went wrong, as the faces branch on it.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The OS error number (positive, as `errno`), if the failure has one.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// The errno's symbolic name (`ENOENT`), as Node's `code`. Refusals and
    /// pattern errors have none.
    pub fn code(&self) -> Option<Cow<'static, str>> {
        match self.kind {
            ErrorKind::SandboxUnavailable => return Some(Cow::Borrowed("ESANDBOX")),
            ErrorKind::FileTooLarge => return Some(Cow::Borrowed("ERR_FS_FILE_TOO_LARGE")),
            _ => {}
        }
        self.errno.map(|e| errno_name(e).0)
    }

    /// The system call, as Node names it (`open`, `scandir`, `spawn /bin/sh`).
    pub fn syscall(&self) -> Option<&str> {
        self.syscall.as_deref()
    }

    /// The path as the caller gave it (for a spawn failure, the shell).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The JS error a face builds for this one (the napi binding, the
    /// server's wire): decided here, once.
    pub fn node_fields(&self) -> NodeFields {
        let mut fields = NodeFields {
            class: NodeClass::Error,
            message: self.to_string(),
            errno: None,
            code: None,
            syscall: None,
            path: None,
            rule: self.rule().map(str::to_string),
        };
        match (self.errno, self.code()) {
            // A system error: Node's errno (negative), code, and the call and
            // path when known.
            (Some(errno), Some(code)) => {
                fields.errno = Some(node_errno(errno));
                fields.code = Some(code);
                fields.syscall = self.syscall.as_ref().map(|s| s.to_string());
                fields.path = self.path.as_ref().map(|p| p.to_string_lossy().into_owned());
            }
            // A code without an errno (ESANDBOX, ERR_FS_FILE_TOO_LARGE): the
            // code alone. Refusals and pattern errors: the message alone (pi's
            // edit tool then shows the model the message itself).
            (_, code) => fields.code = code,
        }
        if self.kind == ErrorKind::FileTooLarge {
            // Node's own: `fs.readFile` throws a RangeError.
            fields.class = NodeClass::RangeError;
        }
        fields
    }
}

/// The class of the JS error a core error becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeClass {
    /// A plain `Error` (every errno error, `ESANDBOX`, pi's exec refusals).
    Error,
    /// A `RangeError` (Node's `ERR_FS_FILE_TOO_LARGE`).
    RangeError,
}

impl NodeClass {
    /// The class's JS name (`error.name`).
    pub fn name(self) -> &'static str {
        match self {
            NodeClass::Error => "Error",
            NodeClass::RangeError => "RangeError",
        }
    }
}

/// A core error as a Node-style JS error: its class, its message, and the
/// properties it carries, each present only when the error has it, set in
/// this order (Node's: errno, code, syscall, path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFields {
    /// Which JS error class to build.
    pub class: NodeClass,
    /// The exact text (`Display`).
    pub message: String,
    /// Negative, as Node's.
    pub errno: Option<i32>,
    /// Node's `code` (`ENOENT`, `ESANDBOX`, `ERR_FS_FILE_TOO_LARGE`).
    pub code: Option<Cow<'static, str>>,
    /// The system call that failed, as Node names it (`open`, `scandir`).
    pub syscall: Option<String>,
    /// Lossy UTF-8, as Node shows a name that is not.
    pub path: Option<String>,
    /// The policy rule of a [`ErrorKind::Protected`] refusal (after `path`).
    pub rule: Option<String>,
}

impl fmt::Display for Error {
    /// Never panics: a field a kind normally carries but lacks reads as empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.as_deref().map(Path::display);
        // The subject of the kinds that always name one (set by their constructor).
        let subject = self.path.as_deref().unwrap_or(Path::new("")).display();
        let text = self.text.as_deref().unwrap_or_default();
        match self.kind {
            ErrorKind::Outside => match path {
                Some(path) => write!(f, "path \"{path}\" is outside workspace"),
                None => f.write_str("path is outside workspace"),
            },
            ErrorKind::Protected => match path {
                Some(path) => write!(f, "path \"{path}\" is protected by policy"),
                None => f.write_str("path is protected by policy"),
            },
            ErrorKind::Os => {
                let (code, text) = errno_name(self.errno.unwrap_or(0));
                write!(f, "{code}: {text}")?;
                if let Some(syscall) = &self.syscall {
                    write!(f, ", {syscall}")?;
                }
                match path {
                    Some(path) => write!(f, " '{path}'"),
                    None => Ok(()),
                }
            }
            ErrorKind::RootUnavailable => {
                // Rust's wording of the OS error, `No such file or directory (os error 2)`.
                let os = io::Error::from_raw_os_error(self.errno.unwrap_or(0));
                write!(f, "cannot open workspace root \"{subject}\": {os}")
            }
            ErrorKind::InvalidGlob | ErrorKind::InvalidRegex => f.write_str(text),
            ErrorKind::PathNotFound => write!(f, "Path not found: {subject}"),
            ErrorKind::Spawn => {
                let (code, _) = errno_name(self.errno.unwrap_or(0));
                write!(f, "spawn {subject} {code}")
            }
            ErrorKind::Aborted => f.write_str(ABORTED_MESSAGE),
            ErrorKind::SandboxUnavailable => write!(f, "sandbox unavailable: {text}"),
            ErrorKind::FileTooLarge => f.write_str(text),
            // pi's words (createLocalBashOperations).
            ErrorKind::ShellNotFound => write!(f, "Custom shell path not found: {text}"),
            ErrorKind::WorkingDirectory => write!(
                f,
                "Working directory does not exist: {text}\nCannot execute {} commands.",
                self.shell_name.unwrap_or("bash")
            ),
            ErrorKind::NoShell => f.write_str(text),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(unix)]
impl From<nix::errno::Errno> for Error {
    fn from(e: nix::errno::Errno) -> Error {
        Error::os(e as i32)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::os(errno_of(&e))
    }
}

/// The errno an I/O error stands for. Errors the standard library makes
/// itself carry none: those are mapped by kind, as Node would report them.
pub fn errno_of(e: &io::Error) -> i32 {
    match e.raw_os_error() {
        // Windows reports Win32 error codes: mapped as libuv maps them.
        #[cfg(windows)]
        Some(code) => win_errno(code),
        #[cfg(not(windows))]
        Some(errno) => errno,
        None => match e.kind() {
            // A NUL byte in an argument.
            io::ErrorKind::InvalidInput => libc::EINVAL,
            io::ErrorKind::Unsupported => libc::ENOTSUP,
            _ => libc::EIO,
        },
    }
}

/// A Win32 error code as the errno libuv maps it to (uv_translate_sys_error).
#[cfg(windows)]
pub fn win_errno(code: i32) -> i32 {
    match code {
        // FILE_NOT_FOUND, PATH_NOT_FOUND, INVALID_NAME, INVALID_DRIVE, BAD_NETPATH, BAD_PATHNAME,
        // MOD_NOT_FOUND, DIRECTORY (on a path through a file: libuv's ENOENT is ENOTDIR here)
        2 | 3 | 15 | 53 | 123 | 161 | 126 => libc::ENOENT,
        267 => libc::ENOTDIR,
        // ACCESS_DENIED, NOACCESS, CANT_ACCESS_FILE
        5 | 998 | 1920 => libc::EPERM,
        // SHARING_VIOLATION, LOCK_VIOLATION, BUSY
        32 | 33 | 170 => libc::EBUSY,
        // FILE_EXISTS, ALREADY_EXISTS
        80 | 183 => libc::EEXIST,
        // TOO_MANY_OPEN_FILES
        4 => libc::EMFILE,
        // DIR_NOT_EMPTY
        145 => libc::ENOTEMPTY,
        // NOT_SAME_DEVICE
        17 => libc::EXDEV,
        // HANDLE_DISK_FULL, DISK_FULL
        39 | 112 => libc::ENOSPC,
        // WRITE_PROTECT
        19 => libc::EROFS,
        // CANT_RESOLVE_FILENAME
        1921 => libc::ELOOP,
        // FILENAME_EXCED_RANGE
        206 => libc::ENAMETOOLONG,
        // INVALID_PARAMETER, INVALID_FLAGS
        87 | 1004 => libc::EINVAL,
        // NOT_SUPPORTED
        50 => libc::ENOTSUP,
        _ => libc::EIO,
    }
}

/// Node's (libuv's) wording of the errnos file operations meet; others get
/// the C library's description, lowercased.
const NODE_WORDING: &[(i32, &str, &str)] = &[
    (libc::ENOENT, "ENOENT", "no such file or directory"),
    (libc::EACCES, "EACCES", "permission denied"),
    (libc::EISDIR, "EISDIR", "illegal operation on a directory"),
    (libc::ENOTDIR, "ENOTDIR", "not a directory"),
    (libc::ELOOP, "ELOOP", "too many symbolic links encountered"),
    (libc::EEXIST, "EEXIST", "file already exists"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG", "name too long"),
    (libc::EPERM, "EPERM", "operation not permitted"),
    (libc::ENOSPC, "ENOSPC", "no space left on device"),
    (libc::EROFS, "EROFS", "read-only file system"),
    (libc::EBUSY, "EBUSY", "resource busy or locked"),
    (libc::EINVAL, "EINVAL", "invalid argument"),
    (libc::EMFILE, "EMFILE", "too many open files"),
    (libc::ENOTEMPTY, "ENOTEMPTY", "directory not empty"),
    (libc::EXDEV, "EXDEV", "cross-device link not permitted"),
    (libc::ESPIPE, "ESPIPE", "invalid seek"),
    (libc::EAGAIN, "EAGAIN", "resource temporarily unavailable"),
    (libc::EIO, "EIO", "i/o error"),
];

/// The errno Node shows for `errno` (positive, the C library's): minus it on
/// unix; on Windows libuv's own numbers (`UV_ENOENT` is -4058 there).
fn node_errno(errno: i32) -> i32 {
    #[cfg(windows)]
    {
        const UV: &[(i32, i32)] = &[
            (libc::ENOENT, -4058),
            (libc::EACCES, -4092),
            (libc::EISDIR, -4068),
            (libc::ENOTDIR, -4052),
            (libc::ELOOP, -4067),
            (libc::EEXIST, -4075),
            (libc::ENAMETOOLONG, -4064),
            (libc::EPERM, -4048),
            (libc::ENOSPC, -4055),
            (libc::EROFS, -4043),
            (libc::EBUSY, -4082),
            (libc::EINVAL, -4071),
            (libc::EMFILE, -4066),
            (libc::ENOTEMPTY, -4051),
            (libc::EXDEV, -4037),
            (libc::ESPIPE, -4041),
            (libc::EAGAIN, -4088),
            (libc::EIO, -4070),
            (libc::ENOTSUP, -4049),
        ];
        if let Some(&(_, uv)) = UV.iter().find(|(e, _)| *e == errno) {
            return uv;
        }
    }
    -errno
}

/// An errno's symbolic name (`ENOENT`) and its description as Node words it.
fn errno_name(errno: i32) -> (Cow<'static, str>, Cow<'static, str>) {
    if let Some(&(_, code, text)) = NODE_WORDING.iter().find(|(e, _, _)| *e == errno) {
        return (Cow::Borrowed(code), Cow::Borrowed(text));
    }
    #[cfg(unix)]
    {
        let e = nix::errno::Errno::from_raw(errno);
        (
            Cow::Owned(format!("{e:?}")),
            Cow::Owned(e.desc().to_lowercase()),
        )
    }
    #[cfg(not(unix))]
    {
        // No errno table off unix; libuv's name for what it cannot name.
        (Cow::Borrowed("UNKNOWN"), Cow::Borrowed("unknown error"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_like_node() {
        let p = Path::new("/w/a.txt");
        let e = Error::os(libc::ENOENT).at("open", p);
        assert_eq!(
            e.to_string(),
            "ENOENT: no such file or directory, open '/w/a.txt'"
        );
        assert_eq!(e.kind(), ErrorKind::Os);
        assert_eq!(e.code().as_deref(), Some("ENOENT"));
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert_eq!(e.syscall(), Some("open"));
        assert_eq!(e.path(), Some(p));
        assert_eq!(
            Error::os(libc::ENOTDIR).at("scandir", p).to_string(),
            "ENOTDIR: not a directory, scandir '/w/a.txt'"
        );
        // The innermost context stays: a read error names no path.
        let read = Error::read(libc::EIO).at("open", p);
        assert_eq!(read.to_string(), "EIO: i/o error, read");
        assert_eq!((read.syscall(), read.path()), (Some("read"), None));
        // Outside Node's table: the C library's text, lowercased, and the C name.
        let other = Error::os(libc::ENOTCONN).at("open", p);
        assert_eq!(other.code().as_deref(), Some("ENOTCONN"));
        assert!(other
            .to_string()
            .starts_with("ENOTCONN: transport endpoint is not connected, open"));
        assert_eq!(
            Error::os(libc::EACCES).to_string(),
            "EACCES: permission denied"
        );
    }

    #[test]
    fn refusals_name_the_path_and_carry_no_code() {
        let e = Error::outside().at("open", Path::new("/etc/passwd"));
        assert_eq!(e.to_string(), "path \"/etc/passwd\" is outside workspace");
        assert_eq!((e.code(), e.errno(), e.syscall()), (None, None, None));
        // Reported under the path the caller was given.
        let e = Error::outside()
            .at("scandir", Path::new("/host/x"))
            .with_path(Path::new("/workspace/x"));
        assert_eq!(e.to_string(), "path \"/workspace/x\" is outside workspace");
    }

    #[test]
    fn tool_messages_stay_as_the_tools_word_them() {
        let spawn = Error::spawn("/bin/sh", libc::ENOENT);
        assert_eq!(spawn.to_string(), "spawn /bin/sh ENOENT");
        assert_eq!(spawn.syscall(), Some("spawn /bin/sh"));
        assert_eq!(spawn.path(), Some(Path::new("/bin/sh")));
        assert_eq!(spawn.code().as_deref(), Some("ENOENT"));
        assert_eq!(
            Error::path_not_found(Path::new("/w/x")).to_string(),
            "Path not found: /w/x"
        );
        assert_eq!(Error::aborted().to_string(), "Operation aborted");
        let sandbox = Error::sandbox_unavailable("no Landlock");
        assert_eq!(sandbox.to_string(), "sandbox unavailable: no Landlock");
        assert_eq!(
            (sandbox.code().as_deref(), sandbox.errno()),
            (Some("ESANDBOX"), None)
        );
        let large = Error::file_too_large(1 << 40);
        assert_eq!(
            large.to_string(),
            "File size (1099511627776) is greater than 2 GiB"
        );
        assert_eq!(
            (large.kind(), large.code().as_deref(), large.errno()),
            (ErrorKind::FileTooLarge, Some("ERR_FS_FILE_TOO_LARGE"), None)
        );
        assert_eq!(
            Error::read(libc::ESPIPE).to_string(),
            "ESPIPE: invalid seek, read"
        );
        let glob = Error::invalid_glob("invalid glob pattern \"[a\": unclosed character class");
        assert_eq!(
            glob.to_string(),
            "invalid glob pattern \"[a\": unclosed character class"
        );
        assert_eq!(glob.code(), None);
        assert_eq!(
            Error::invalid_regex("rg: regex parse error").to_string(),
            "rg: regex parse error"
        );
        let root = Error::root_unavailable(Path::new("/nope"), libc::ENOENT);
        assert_eq!(
            root.to_string(),
            "cannot open workspace root \"/nope\": No such file or directory (os error 2)"
        );
        assert_eq!(root.code().as_deref(), Some("ENOENT"));
    }

    /// Every kind, even built without the fields its constructor sets (the
    /// path of a root, not-found or spawn error), formats without panicking:
    /// `Display` runs inside the faces' error paths, where a panic would kill
    /// a server thread or abort Node.
    #[test]
    fn display_never_panics_whatever_a_kind_lacks() {
        let kinds = [
            ErrorKind::Outside,
            ErrorKind::Os,
            ErrorKind::RootUnavailable,
            ErrorKind::InvalidGlob,
            ErrorKind::InvalidRegex,
            ErrorKind::PathNotFound,
            ErrorKind::Spawn,
            ErrorKind::Aborted,
            ErrorKind::SandboxUnavailable,
            ErrorKind::FileTooLarge,
            ErrorKind::ShellNotFound,
            ErrorKind::WorkingDirectory,
            ErrorKind::NoShell,
            ErrorKind::Protected,
        ];
        for kind in kinds {
            let bare = Error::new(kind);
            let _ = bare.to_string();
            let _ = bare.node_fields();
        }
        assert_eq!(
            Error::new(ErrorKind::PathNotFound).to_string(),
            "Path not found: "
        );
        assert!(Error::new(ErrorKind::Spawn)
            .to_string()
            .starts_with("spawn  "));
    }

    #[test]
    fn exec_preflight_errors_read_as_pi_words_them() {
        let shell = Error::shell_not_found("/no/such/shell");
        assert_eq!(
            shell.to_string(),
            "Custom shell path not found: /no/such/shell"
        );
        assert_eq!(shell.kind(), ErrorKind::ShellNotFound);
        let cwd = Error::working_directory("/w/gone");
        assert_eq!(
            cwd.to_string(),
            "Working directory does not exist: /w/gone\nCannot execute bash commands."
        );
        for e in [shell, cwd] {
            let f = e.node_fields();
            assert_eq!(
                (f.errno, f.code, f.syscall, f.path),
                (None, None, None, None)
            );
            assert_eq!(f.class, NodeClass::Error);
        }
    }

    #[test]
    fn node_fields_are_the_binding_and_the_wire_shape() {
        let os = Error::os(libc::ENOENT)
            .at("open", Path::new("/w/x"))
            .node_fields();
        assert_eq!(
            os,
            NodeFields {
                class: NodeClass::Error,
                message: "ENOENT: no such file or directory, open '/w/x'".into(),
                errno: Some(-libc::ENOENT),
                code: Some("ENOENT".into()),
                syscall: Some("open".into()),
                path: Some("/w/x".into()),
                rule: None,
            }
        );
        let spawn = Error::spawn("/bin/sh", libc::EACCES).node_fields();
        assert_eq!(spawn.message, "spawn /bin/sh EACCES");
        assert_eq!(
            (spawn.syscall.as_deref(), spawn.path.as_deref()),
            (Some("spawn /bin/sh"), Some("/bin/sh"))
        );
        let outside = Error::outside().at("open", Path::new("/etc")).node_fields();
        assert_eq!(
            (outside.code, outside.errno, outside.path),
            (None, None, None)
        );
        let protected = Error::protected("*.pem")
            .at("open", Path::new("/w/k.pem"))
            .node_fields();
        assert_eq!(
            protected.message,
            "path \"/w/k.pem\" is protected by policy"
        );
        assert_eq!(
            (
                protected.code,
                protected.errno,
                protected.path,
                protected.rule
            ),
            (None, None, None, Some("*.pem".into()))
        );
        let large = Error::file_too_large(1 << 40).node_fields();
        assert_eq!(large.class, NodeClass::RangeError);
        assert_eq!(
            (large.code.as_deref(), large.errno),
            (Some("ERR_FS_FILE_TOO_LARGE"), None)
        );
        let sandbox = Error::sandbox_unavailable("x").node_fields();
        assert_eq!(
            (sandbox.code.as_deref(), sandbox.syscall),
            (Some("ESANDBOX"), None)
        );
        // A root that cannot be opened is a system error too.
        let root = Error::root_unavailable(Path::new("/nope"), libc::ENOENT).node_fields();
        assert_eq!(
            (root.errno, root.path.as_deref()),
            (Some(-libc::ENOENT), Some("/nope"))
        );
    }

    #[test]
    fn io_errors_map_to_errnos() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EACCES)),
            libc::EACCES
        );
        assert_eq!(
            errno_of(&io::Error::from(io::ErrorKind::InvalidInput)),
            libc::EINVAL
        );
        assert_eq!(
            errno_of(&io::Error::from(io::ErrorKind::Unsupported)),
            libc::ENOTSUP
        );
        assert_eq!(errno_of(&io::Error::other("x")), libc::EIO);
        assert_eq!(
            Error::from(io::Error::from_raw_os_error(libc::ELOOP)).errno(),
            Some(libc::ELOOP)
        );
    }
}
