//! Where this process finds the sandbox helper's image: given once by the face (the napi face:
//! the platform package's `pi-native-ops-server`, found by JS's `serverBinaryPath()`; the server:
//! its own executable), opened then and executed by descriptor, so a path swapped afterwards
//! changes nothing.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use crate::error::Error;

/// The image, or why there is none; `None` until a face says.
static IMAGE: RwLock<Option<Result<Arc<OwnedFd>, String>>> = RwLock::new(None);

/// What a sandbox is refused with when no face gave this process a helper.
const NOT_GIVEN: &str = "no sandbox helper: sandboxed commands run under the pi-native-ops-server \
     binary of this platform's package, which was not found (install the platform package, or \
     build it from a checkout with scripts/build-server.sh)";

/// Uses the executable at `path` as the sandbox helper from now on (`None`: none was found, and
/// sandboxes are refused with `NOT_GIVEN`). Fails (`SandboxUnavailable`) when it cannot be opened
/// or is not an executable regular file; sandboxes are refused with the same words then.
pub fn set_path(path: Option<&Path>) -> Result<(), Error> {
    let image = match path {
        None => Err(NOT_GIVEN.to_string()),
        Some(path) => open(path).map(Arc::new).map_err(|why| {
            format!(
                "the sandbox helper {} cannot be used: {why}",
                path.display()
            )
        }),
    };
    let result = image
        .as_ref()
        .map(drop)
        .map_err(|why| Error::sandbox_unavailable(why.clone()));
    *IMAGE.write().unwrap_or_else(PoisonError::into_inner) = Some(image);
    result
}

/// Uses this process's own executable as the sandbox helper (the server, which is the helper's
/// image): opened now, so a binary replaced on disk later changes nothing.
pub fn use_current_exe() {
    let _ = set_path(Some(Path::new("/proc/self/exe")));
}

/// The helper's image, or the sandbox's refusal.
pub(in crate::exec) fn image() -> Result<Arc<OwnedFd>, Error> {
    let given = IMAGE.read().unwrap_or_else(PoisonError::into_inner).clone();
    match given {
        Some(Ok(fd)) => Ok(fd),
        Some(Err(why)) => Err(Error::sandbox_unavailable(why)),
        #[cfg(test)]
        None => test_image(),
        #[cfg(not(test))]
        None => Err(Error::sandbox_unavailable(NOT_GIVEN.to_string())),
    }
}

/// The core's unit tests' helper: the crate's `pi-sandbox-helper` binary, which cargo builds
/// beside the test binary (`target/<profile>/`) for `cargo test`.
#[cfg(test)]
fn test_image() -> Result<Arc<OwnedFd>, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::sandbox_unavailable(e.to_string()))?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let path = dir.join("pi-sandbox-helper");
    let fd = open(&path).map_err(|why| {
        Error::sandbox_unavailable(format!("no test helper at {}: {why}", path.display()))
    })?;
    let fd = Arc::new(fd);
    *IMAGE.write().unwrap_or_else(PoisonError::into_inner) = Some(Ok(Arc::clone(&fd)));
    Ok(fd)
}

/// Opens `path` for execution by descriptor (`O_PATH`): a regular file this process may execute.
pub(in crate::exec) fn open(path: &Path) -> Result<OwnedFd, String> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| "a NUL byte in its path")?;
    // SAFETY: a NUL-terminated path; the descriptor is ours.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: just opened, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `stat` is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our descriptor, a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".into());
    }
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c_path.as_ptr(), libc::X_OK) } != 0 || st.st_mode & 0o111 == 0 {
        return Err("not executable".into());
    }
    Ok(fd)
}
