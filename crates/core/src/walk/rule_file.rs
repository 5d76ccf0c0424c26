//! The one reader of the files ignore rules come from: `.ignore`,
//! `.gitignore` and `info/exclude` inside the walk and above it, a `.git`
//! file and its `commondir`. Every one of them is a repository's to choose,
//! so the reader takes regular files only (a FIFO, a device or a socket
//! reads as no file, and opening one never waits), reads at most
//! [`MAX_RULE_FILE_BYTES`], and stops when the process is exiting.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::listing::{borrow, open_dir_at, open_file_at, DirHandle, DirRef};

/// Bytes of a rule file read, at most: the rest of a larger one is left out
/// (ripgrep reads it all), so a huge or sparse file named `.gitignore`
/// cannot exhaust memory. 64 MiB: a thousand times the largest real ones.
pub(crate) const MAX_RULE_FILE_BYTES: u64 = 64 << 20;

/// Bytes read at once, between two looks at the exit flag: 1 MiB.
const CHUNK_BYTES: u64 = 1 << 20;

/// The rule file at `path`, symlinks followed (as ripgrep reads the files
/// of the start directory's ancestors); `None` when it is missing, not a
/// regular file, or unreadable.
pub(crate) fn read_path(path: &Path) -> Option<Vec<u8>> {
    // Its kind is asked first, so no device or FIFO is ever opened, and once
    // more on the descriptor for one swapped in between.
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    read_regular(open_nonblocking(path).ok()?)
}

/// The rule file at `rel` below `dir` (`a/b`: each part without following a
/// symlink); `None` as for [`read_path`].
pub(crate) fn read_at(dir: DirRef<'_>, rel: &str) -> Option<Vec<u8>> {
    let mut top: Option<DirHandle> = None;
    let mut parts = rel.split('/').peekable();
    while let Some(part) = parts.next() {
        let at = top.as_ref().map_or(dir, borrow);
        if parts.peek().is_none() {
            // Opened without waiting: a FIFO is refused by its kind below.
            return read_regular(open_file_at(at, part.as_bytes()).ok()?);
        }
        top = Some(open_dir_at(at, part.as_bytes()).ok()?);
    }
    None
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(windows)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// The text of `file` if it is a regular file, up to [`MAX_RULE_FILE_BYTES`].
fn read_regular(file: File) -> Option<Vec<u8>> {
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    // Not `File::read_to_end`, which reserves the size the file claims.
    let mut text = Vec::new();
    let mut file = file.take(MAX_RULE_FILE_BYTES);
    loop {
        if crate::cancel::shutting_down() {
            return None;
        }
        match (&mut file).take(CHUNK_BYTES).read_to_end(&mut text) {
            Ok(0) => return Some(text),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn dir_fd(path: &Path) -> DirHandle {
        nix::fcntl::open(
            path,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap()
    }

    #[test]
    fn reads_regular_files_and_refuses_everything_else() {
        let t = tempfile::tempdir().unwrap();
        let p = |n: &str| t.path().join(n);
        std::fs::write(p("rules"), b"*.log\n").unwrap();
        std::os::unix::fs::symlink("/dev/zero", p("zero")).unwrap();
        std::os::unix::fs::symlink("rules", p("link")).unwrap();
        nix::unistd::mkfifo(&p("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // By path, symlinks are followed, to regular files only; a FIFO with
        // no writer is never waited on.
        assert_eq!(read_path(&p("rules")).unwrap(), b"*.log\n");
        assert_eq!(read_path(&p("link")).unwrap(), b"*.log\n");
        assert_eq!(read_path(&p("zero")), None);
        assert_eq!(read_path(&p("fifo")), None);
        assert_eq!(read_path(Path::new("/dev/stdin")), None);
        assert_eq!(read_path(&p("missing")), None);
        // Below a directory, never through a symlink.
        let dir = dir_fd(t.path());
        assert_eq!(read_at(dir.as_fd(), "rules").unwrap(), b"*.log\n");
        assert_eq!(read_at(dir.as_fd(), "link"), None);
        assert_eq!(read_at(dir.as_fd(), "zero"), None);
        assert_eq!(read_at(dir.as_fd(), "fifo"), None);
    }

    #[test]
    fn a_larger_file_is_cut_at_the_bound() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("big");
        // Sparse: claims far more than the bound, holds nothing.
        File::create(&path)
            .unwrap()
            .set_len(MAX_RULE_FILE_BYTES * 4)
            .unwrap();
        let text = read_path(&path).unwrap();
        assert_eq!(text.len() as u64, MAX_RULE_FILE_BYTES);
        // Reserved as it arrived, not from the size claimed.
        assert!(text.capacity() as u64 <= 2 * MAX_RULE_FILE_BYTES);
    }
}
