//! Reading a file for the index: which files are indexed at all, and one
//! bounded read of each.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;

use nix::sys::stat::{fstat, SFlag};

use super::grams::GramScratch;
use super::DEFAULT_MAX_FILE_BYTES;

/// Reads files and turns them into n-grams.
pub(super) struct Reader {
    max_file_bytes: u64,
    pub(super) scratch: GramScratch,
    pub(super) buf: Vec<u8>,
}

/// What reading a file gave.
pub(super) enum Read_ {
    /// Its contents (in the reader's `buf`), and whether it has more than
    /// one link.
    Read(bool),
    Always,
}

impl Reader {
    pub(super) fn new(max_file_bytes: u64) -> Reader {
        Reader {
            max_file_bytes,
            scratch: GramScratch::new(),
            buf: Vec::new(),
        }
    }

    /// Reads `file` into `buf`; `Always` for a file that is searched
    /// without asking the index. A hard-linked file is read only when
    /// `links` (its inode is watched).
    pub(super) fn read(&mut self, file: File, links: bool) -> Read_ {
        let Ok(st) = fstat(file.as_fd()) else {
            return Read_::Always;
        };
        let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
        // A hard-linked file can be written through a name outside every
        // watched directory: indexed only with its inode watched.
        let linked = st.st_nlink > 1;
        if !regular || (linked && !links) || st.st_size as u64 > self.max_file_bytes {
            return Read_::Always;
        }
        if read_up_to(
            &file,
            st.st_size as usize,
            self.max_file_bytes,
            &mut self.buf,
        )
        .is_err()
            || self.buf.len() as u64 > self.max_file_bytes
        {
            return Read_::Always;
        }
        // grep transcodes UTF-16 files (BOM first): their bytes are not
        // what it matches.
        if self.buf.starts_with(&[0xFF, 0xFE]) || self.buf.starts_with(&[0xFE, 0xFF]) {
            return Read_::Always;
        }
        Read_::Read(linked)
    }
}

/// Bytes of the size fstat claims that a read trusts up front: a file that
/// claims more (a sparse one, under a `max_file_bytes` raised past this)
/// grows the buffer only as bytes arrive. The default bound: under it every
/// file is read in one go.
pub(super) const READ_RESERVE: usize = DEFAULT_MAX_FILE_BYTES as usize;

/// Reads `file` into `buf` (replacing its contents): the `size` bytes fstat
/// gave in one read (up to `READ_RESERVE`), then on to the end if it has
/// more, stopping past `max` bytes. (`read_to_end` without a size hint reads
/// 8 KiB first and doubles: three reads for a typical source file.)
pub(super) fn read_up_to(
    mut file: &File,
    size: usize,
    max: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    let size = size.min(READ_RESERVE);
    // One byte more than the size: a read that fills it has grown.
    buf.resize(size + 1, 0);
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    if filled > size {
        let rest = (max + 1).saturating_sub(filled as u64);
        file.take(rest).read_to_end(buf)?;
    }
    Ok(())
}
