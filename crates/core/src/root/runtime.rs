//! Where the agent's paths are on the host: the workspace as the agent sees
//! it (`runtimeRoot`, e.g. `/workspace`) is the workspace on the host. The
//! one mapping between the two forms, for the bounded root (its runtime
//! paths), exec (the `cwd` a command starts in) and find (its result paths).
//!
//! A path is under a root by whole components (`/workspaces` is not under
//! `/workspace`), compared as the target's filesystem compares names: bytes
//! on unix; on Windows in one spelling (`/` or `\`, the `\\?\` prefix,
//! the drive letter's case) and case-insensitively. Nothing is resolved:
//! `..` and symlinks are the bounded root's business.

use std::path::{Path, PathBuf};

/// The workspace on the host and as the agent sees it.
///
/// ```
/// use std::path::Path;
/// use pi_native_ops_core::root::RuntimeMap;
///
/// let map = RuntimeMap::new("/home/u/proj", "/workspace");
/// assert_eq!(map.to_host(Path::new("/workspace/src")), Path::new("/home/u/proj/src"));
/// assert_eq!(map.to_runtime(Path::new("/home/u/proj/src")), Path::new("/workspace/src"));
/// // Any other path is the host's own.
/// assert_eq!(map.to_host(Path::new("/workspaces")), Path::new("/workspaces"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeMap {
    /// The workspace on the host.
    pub host: PathBuf,
    /// The workspace as the agent sees it.
    pub runtime: PathBuf,
}

impl RuntimeMap {
    /// The map of `host` seen by the agent as `runtime`.
    pub fn new(host: impl Into<PathBuf>, runtime: impl Into<PathBuf>) -> RuntimeMap {
        RuntimeMap {
            host: host.into(),
            runtime: runtime.into(),
        }
    }

    /// `path` on the host: under the runtime root, the same path under the
    /// host root; any other path as given (also when both roots are one).
    pub fn to_host(&self, path: &Path) -> PathBuf {
        if self.host == self.runtime {
            return path.to_path_buf();
        }
        match self.runtime_relative(path) {
            Some(rel) => join(&self.host, &rel),
            None => path.to_path_buf(),
        }
    }

    /// `path` in the agent's form: under the host root, the same path under
    /// the runtime root; any other path as given.
    pub fn to_runtime(&self, path: &Path) -> PathBuf {
        match self.host_relative(path) {
            Some(rel) => join(&self.runtime, &rel),
            None => path.to_path_buf(),
        }
    }

    /// The agent's form of `rel`, a path relative to the workspace (the
    /// runtime root itself when empty).
    pub fn runtime_path(&self, rel: &Path) -> PathBuf {
        join(&self.runtime, rel)
    }

    /// `path` relative to the runtime root (empty for the root itself), if
    /// it lies under it.
    pub fn runtime_relative(&self, path: &Path) -> Option<PathBuf> {
        beneath(path, &self.runtime)
    }

    /// `path` relative to the host root (empty for the root itself), if it
    /// lies under it.
    pub fn host_relative(&self, path: &Path) -> Option<PathBuf> {
        beneath(path, &self.host)
    }
}

/// `root/rel`, or `root` itself for an empty `rel` (no trailing separator).
fn join(root: &Path, rel: &Path) -> PathBuf {
    match rel.as_os_str().is_empty() {
        true => root.to_path_buf(),
        false => root.join(rel),
    }
}

/// The rest of `path` after `root`, by whole components.
#[cfg(not(windows))]
fn beneath(path: &Path, root: &Path) -> Option<PathBuf> {
    path.strip_prefix(root).ok().map(Path::to_path_buf)
}

/// The rest of `path` after `root`, both in one spelling, names compared
/// case-insensitively (as the bounded root compares them).
#[cfg(windows)]
fn beneath(path: &Path, root: &Path) -> Option<PathBuf> {
    use super::names::{normalize, strip_prefix_ci};
    let path = normalize(path.as_os_str())?;
    let root = normalize(root.as_os_str())?;
    strip_prefix_ci(&path, &root).map(PathBuf::from)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn paths_under_one_root_move_to_the_other_by_whole_components() {
        let map = RuntimeMap::new("/home/u/proj", "/workspace");
        let host = |p: &str| map.to_host(Path::new(p));
        assert_eq!(host("/workspace"), Path::new("/home/u/proj"));
        assert_eq!(host("/workspace/"), Path::new("/home/u/proj"));
        assert_eq!(host("/workspace/src"), Path::new("/home/u/proj/src"));
        assert_eq!(host("/workspaces"), Path::new("/workspaces"));
        assert_eq!(host("/tmp"), Path::new("/tmp"));
        assert_eq!(host("rel/x"), Path::new("rel/x"));
        let runtime = |p: &str| map.to_runtime(Path::new(p));
        assert_eq!(runtime("/home/u/proj"), Path::new("/workspace"));
        assert_eq!(runtime("/home/u/proj/a/b"), Path::new("/workspace/a/b"));
        assert_eq!(runtime("/home/u/project"), Path::new("/home/u/project"));
        assert_eq!(
            map.runtime_relative(Path::new("/workspace/a")),
            Some(PathBuf::from("a"))
        );
        assert_eq!(
            map.host_relative(Path::new("/home/u/proj")),
            Some(PathBuf::new())
        );
        assert_eq!(map.host_relative(Path::new("/workspace/a")), None);
    }

    #[test]
    fn one_root_seen_as_itself_leaves_paths_as_given() {
        let same = RuntimeMap::new("/w", "/w");
        assert_eq!(same.to_host(Path::new("/w/x/../y")), Path::new("/w/x/../y"));
        assert_eq!(same.to_runtime(Path::new("/w/x")), Path::new("/w/x"));
    }
}

#[cfg(all(test, windows))]
mod windows_tests {
    use super::*;

    #[test]
    fn names_compare_as_the_filesystem_compares_them() {
        let map = RuntimeMap::new(r"C:\Users\u\proj", r"C:\workspace");
        assert_eq!(
            map.to_host(Path::new("c:/Workspace/src")),
            Path::new(r"C:\Users\u\proj\src")
        );
        assert_eq!(
            map.to_runtime(Path::new(r"\\?\C:\users\U\PROJ\a")),
            Path::new(r"C:\workspace\a")
        );
        assert_eq!(
            map.to_host(Path::new(r"C:\workspaces")),
            Path::new(r"C:\workspaces")
        );
        assert_eq!(
            map.host_relative(Path::new(r"C:\Users\u\proj")),
            Some(PathBuf::new())
        );
    }
}
