//! System-call helpers shared by the walker, grep and exec. Everything here
//! works on buffers the caller provides and takes no lock, so it is also safe
//! in a child forked from a multi-threaded process (exec's supervisor), or sharing its memory.

use std::io;
#[cfg(unix)]
use std::os::fd::RawFd;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Reads into `buf` until it is full or the file ends, retrying interrupted
/// reads; returns the bytes read (less than `buf.len()` only at end of file).
/// Async-signal-safe: raw `read(2)` calls and `errno`, no allocation.
pub(crate) fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the kernel writes at most `rest.len()` bytes into `rest`.
        let n = retrying(|| unsafe {
            libc::read(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len()) as i64
        })?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// Runs a raw system call again while it is interrupted by a signal; its
/// non-negative result, or the `errno` it failed with. Async-signal-safe
/// (`errno` only, no allocation).
fn retrying(mut call: impl FnMut() -> i64) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use dirent::{getdents, DirentBuf};

// Pipes, descriptors passed over sockets, waiting until readable.
mod fds;
pub(crate) use fds::{pipe, raw_cloexec_pipe};
#[cfg(target_os = "linux")]
pub(crate) use fds::{recv_fds, send_fds, seqpacket_pair, wait_readable, Readiness};

/// `getdents64` and its records, bounds-checked: a record is only read
/// within the bytes the kernel returned, and a malformed one ends the batch.
#[cfg(any(target_os = "linux", target_os = "android"))]
mod dirent {
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, BorrowedFd};

    // A `linux_dirent64` record: d_ino (u64), d_off (i64), d_reclen (u16),
    // d_type (u8), then the name and its NUL; d_reclen counts it all.
    const RECLEN_AT: usize = 16;
    const TYPE_AT: usize = 18;
    const NAME_AT: usize = 19;

    /// A buffer `getdents64` fills, 8-byte aligned as the kernel lays out its
    /// records. Left uninitialized: only what the kernel wrote is read, and
    /// zeroing costs more than listing a small directory.
    #[repr(C, align(8))]
    pub(crate) struct DirentBuf<const BYTES: usize>([MaybeUninit<u8>; BYTES]);

    impl<const BYTES: usize> DirentBuf<BYTES> {
        pub(crate) const fn new() -> Self {
            DirentBuf([MaybeUninit::uninit(); BYTES])
        }
    }

    /// The next batch of records of the directory open at `fd`, read into
    /// `buf`; `None` at the end of the directory. Async-signal-safe.
    pub(crate) fn getdents<'b, const BYTES: usize>(
        fd: BorrowedFd<'_>,
        buf: &'b mut DirentBuf<BYTES>,
    ) -> io::Result<Option<Dirents<'b>>> {
        // SAFETY: the kernel writes at most `BYTES` bytes into `buf`.
        let n = super::retrying(|| unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.0.as_mut_ptr(),
                BYTES,
            )
        })?;
        if n == 0 {
            return Ok(None);
        }
        let len = n.min(BYTES);
        // SAFETY: the kernel initialised the first `n` bytes (`n <= BYTES`).
        let bytes = unsafe { std::slice::from_raw_parts(buf.0.as_ptr().cast::<u8>(), len) };
        Ok(Some(Dirents { bytes }))
    }

    /// The records of one `getdents64` batch, `.` and `..` included.
    pub(crate) struct Dirents<'a> {
        bytes: &'a [u8],
    }

    /// One directory entry: its name (without the NUL) and `d_type`.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) struct Dirent<'a> {
        pub(crate) name: &'a [u8],
        pub(crate) d_type: u8,
    }

    impl<'a> Dirents<'a> {
        /// Records laid out as `getdents64` writes them (for tests).
        #[cfg(test)]
        pub(crate) fn of(bytes: &'a [u8]) -> Self {
            Dirents { bytes }
        }
    }

    impl<'a> Iterator for Dirents<'a> {
        type Item = Dirent<'a>;

        fn next(&mut self) -> Option<Dirent<'a>> {
            // Taken: after a malformed record the iterator stays empty.
            let bytes = std::mem::take(&mut self.bytes);
            let reclen = bytes.get(RECLEN_AT..TYPE_AT)?;
            let reclen = usize::from(u16::from_ne_bytes([reclen[0], reclen[1]]));
            // Too short to hold its header and a NUL (0 included, which would
            // never advance), or running past the batch: malformed.
            if reclen <= NAME_AT || reclen > bytes.len() {
                return None;
            }
            let name = &bytes[NAME_AT..reclen];
            let name = &name[..memchr::memchr(0, name).unwrap_or(name.len())];
            let d_type = bytes[TYPE_AT];
            self.bytes = &bytes[reclen..];
            Some(Dirent { name, d_type })
        }
    }
}

/// The calling thread's `errno`. Async-signal-safe (one load, no allocation), for forked children
/// where `io::Error::last_os_error` would do the same load but build an error.
pub(crate) fn errno() -> i32 {
    // SAFETY: `errno_location` returns the calling thread's errno slot, valid and aligned for as
    // long as the thread lives.
    unsafe { *errno_location() }
}

/// Sets the calling thread's `errno` (a value a caller reads after a failed call).
/// Async-signal-safe.
#[cfg(target_os = "linux")]
pub(crate) fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *errno_location() = value };
}

/// The address of the calling thread's `errno`, from the C library of each target.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: takes no argument and always returns the calling thread's errno slot.
    unsafe { libc::__errno_location() }
}

#[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: takes no argument and always returns the calling thread's errno slot.
    unsafe { libc::__error() }
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd"
)))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: takes no argument and always returns the calling thread's errno slot.
    unsafe { libc::__errno() }
}

#[cfg(unix)]
/// Descriptors closed one by one where `close_range` is missing: up to the
/// open-files limit, but at most this many (a huge limit would cost a system
/// call each), or `FD_SCAN_DEFAULT` when the limit is unknown.
const FD_SCAN_MAX: u64 = 65_536;
#[cfg(unix)]
const FD_SCAN_DEFAULT: RawFd = 4096;

/// Closes every descriptor above stderr except `keep` (sorted ascending; -1 entries are ignored).
/// A fork of a multi-threaded process holds every descriptor the parent had, other threads' pipes
/// included (close-on-exec does not help a child that never execs or has not yet): each forked
/// child of Node calls this first, or another spawn's end-of-file waits for it.
///
/// # Safety
///
/// Only in a forked child that owns every descriptor of its process: it closes descriptors that
/// Rust values (an `OwnedFd`, a `File`) may still name, which nothing may use afterwards but
/// through `keep`.
#[cfg(unix)]
pub(crate) unsafe fn close_all_except(keep: &[RawFd]) {
    let mut next = libc::STDERR_FILENO + 1;
    for &fd in keep.iter().chain(std::iter::once(&RawFd::MAX)) {
        if fd >= next {
            // SAFETY: the caller's contract, passed on.
            unsafe { close_range(next, fd - 1) };
            next = fd.saturating_add(1);
        }
    }
}

/// Closes descriptors `first` to `last`.
///
/// # Safety
///
/// As `close_all_except`: nothing uses those descriptors afterwards.
#[cfg(unix)]
unsafe fn close_range(first: RawFd, last: RawFd) {
    if first > last {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: plain integers; the caller gives the range up.
    if unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0,
        )
    } == 0
    {
        return;
    }
    // SAFETY: `rlimit` is a plain C struct (all-zero bytes are valid), then filled by the kernel.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `limit` is valid and writable.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        (limit.rlim_cur as u64).min(FD_SCAN_MAX) as RawFd
    } else {
        FD_SCAN_DEFAULT
    };
    let mut fd = first;
    while fd <= last && fd < max {
        // SAFETY: the caller gives the range up.
        unsafe { libc::close(fd) };
        fd += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn read_full_fills_across_short_reads_and_stops_at_end() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                // Separate writes: the reader sees several short reads.
                for piece in [&b"hel"[..], b"lo ", b"world"] {
                    writer.write_all(piece).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            });
            let mut buf = [0u8; 8];
            assert_eq!(read_full(reader.as_fd(), &mut buf).unwrap(), 8);
            assert_eq!(&buf, b"hello wo");
            assert_eq!(read_full(reader.as_fd(), &mut buf).unwrap(), 3);
            assert_eq!(&buf[..3], b"rld");
            assert_eq!(read_full(reader.as_fd(), &mut buf).unwrap(), 0);
        });
    }

    #[test]
    fn read_full_reports_errors() {
        let (_reader, writer) = std::io::pipe().unwrap();
        let e = read_full(writer.as_fd(), &mut [0u8; 4]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert_eq!(read_full(writer.as_fd(), &mut []).unwrap(), 0);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    mod dirents {
        use super::super::dirent::{Dirent, Dirents};
        use super::super::{getdents, DirentBuf};
        use std::os::fd::AsFd;

        /// A record as the kernel writes it, padded to 8 bytes.
        fn record(name: &[u8], d_type: u8) -> Vec<u8> {
            let reclen = (19 + name.len() + 1).next_multiple_of(8);
            let mut r = vec![0u8; reclen];
            r[..8].copy_from_slice(&7u64.to_ne_bytes());
            r[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
            r[18] = d_type;
            r[19..19 + name.len()].copy_from_slice(name);
            r
        }

        fn set_reclen(bytes: &mut [u8], at: usize, reclen: u16) {
            bytes[at + 16..at + 18].copy_from_slice(&reclen.to_ne_bytes());
        }

        fn names(bytes: &[u8]) -> Vec<Vec<u8>> {
            Dirents::of(bytes).map(|d| d.name.to_vec()).collect()
        }

        #[test]
        fn well_formed_records() {
            let mut bytes = record(b".", libc::DT_DIR);
            bytes.extend(record(b"a-much-longer-name.txt", libc::DT_REG));
            bytes.extend(record(b"l", libc::DT_LNK));
            let all: Vec<Dirent<'_>> = Dirents::of(&bytes).collect();
            assert_eq!(
                all,
                [
                    Dirent {
                        name: b".",
                        d_type: libc::DT_DIR
                    },
                    Dirent {
                        name: b"a-much-longer-name.txt",
                        d_type: libc::DT_REG
                    },
                    Dirent {
                        name: b"l",
                        d_type: libc::DT_LNK
                    },
                ]
            );
        }

        #[test]
        fn a_zero_reclen_stops_instead_of_looping() {
            let mut bytes = record(b"first", libc::DT_REG);
            let second = bytes.len();
            bytes.extend(record(b"second", libc::DT_REG));
            bytes.extend(record(b"third", libc::DT_REG));
            set_reclen(&mut bytes, second, 0);
            assert_eq!(names(&bytes), [b"first".to_vec()]);
        }

        #[test]
        fn a_reclen_shorter_than_the_header_stops() {
            for short in [1, 8, 18, 19] {
                let mut bytes = record(b"a", libc::DT_REG);
                bytes.extend(record(b"b", libc::DT_REG));
                set_reclen(&mut bytes, 0, short);
                assert!(names(&bytes).is_empty(), "reclen {short}");
            }
        }

        #[test]
        fn a_reclen_past_the_end_stops() {
            let mut bytes = record(b"first", libc::DT_REG);
            let second = bytes.len();
            bytes.extend(record(b"second", libc::DT_REG));
            set_reclen(&mut bytes, second, u16::MAX);
            assert_eq!(names(&bytes), [b"first".to_vec()]);
            // One byte past the end of the batch.
            let len = (bytes.len() - second + 1) as u16;
            set_reclen(&mut bytes, second, len);
            assert_eq!(names(&bytes), [b"first".to_vec()]);
        }

        #[test]
        fn a_truncated_record_stops() {
            let mut bytes = record(b"first", libc::DT_REG);
            let whole = bytes.len();
            bytes.extend(record(b"second", libc::DT_REG));
            // Cut inside the second record's header, its name, and at every byte.
            for cut in whole..bytes.len() {
                assert_eq!(names(&bytes[..cut]), [b"first".to_vec()], "cut {cut}");
            }
            for cut in 0..whole {
                assert!(names(&bytes[..cut]).is_empty(), "cut {cut}");
            }
        }

        #[test]
        fn a_name_without_nul_ends_at_its_record() {
            let mut bytes = record(b"abc", libc::DT_REG);
            let reclen = bytes.len();
            bytes[19..reclen].fill(b'x');
            bytes.extend(record(b"next", libc::DT_REG));
            assert_eq!(names(&bytes), [vec![b'x'; reclen - 19], b"next".to_vec()]);
        }

        #[test]
        fn lists_a_real_directory() {
            let t = tempfile::tempdir().unwrap();
            let mut made: Vec<Vec<u8>> = (0..300)
                .map(|i| format!("entry-{i:03}").into_bytes())
                .collect();
            for name in &made {
                std::fs::write(t.path().join(std::str::from_utf8(name).unwrap()), "").unwrap();
            }
            let dir = std::fs::File::open(t.path()).unwrap();
            // Small enough that the directory takes several batches.
            let mut buf = DirentBuf::<1024>::new();
            let mut seen = Vec::new();
            while let Some(batch) = getdents(dir.as_fd(), &mut buf).unwrap() {
                for d in batch {
                    if d.name != b"." && d.name != b".." {
                        assert_eq!(d.d_type, libc::DT_REG);
                        seen.push(d.name.to_vec());
                    }
                }
            }
            seen.sort();
            made.sort();
            assert_eq!(seen, made);
        }
    }
}
