//! Whole-file and head reads of an opened file, as Node's `fs.readFile` reads: shared by the
//! bounded root of every target.

use std::fs::File;
use std::io::Read;

use crate::error::{errno_of, Error, MAX_READ_BYTES};
use crate::Result;

/// Bytes a read reserves up front from the size a file claims (or a caller
/// asks for): a source file is read in one go, while a file claiming more
/// (a sparse one claims what it likes) grows its buffer only as bytes
/// actually arrive. 8 MiB: beyond the source files pi reads.
const READ_RESERVE: u64 = 8 << 20;

/// The whole of `file`: a regular file up to its size at open time (refused
/// past `max` bytes, at most [`MAX_READ_BYTES`], before any is read: Node's
/// `ERR_FS_FILE_TOO_LARGE`, in Node's words past Node's bound), anything else to its end (refused once more than
/// `max` has arrived). `claimed` is the size the file's metadata gives a
/// regular file, else 0.
pub(crate) fn whole(file: &File, claimed: u64, max: u64) -> Result<Vec<u8>> {
    let max = max.min(MAX_READ_BYTES);
    // Past Node's own bound, Node's refusal, whatever the caller carries.
    let refuse = |size: u64| {
        Err(if size > MAX_READ_BYTES {
            Error::file_too_large(size)
        } else {
            Error::file_too_large_to_carry(size, max)
        })
    };
    if claimed > max {
        return refuse(claimed);
    }
    // Node reads a regular file up to its size, and a file claiming none
    // (a FIFO, a /proc file) to its end: one byte past the bound tells.
    let limit = if claimed > 0 { claimed } else { max + 1 };
    let buf = bounded(file, limit, claimed)?;
    if buf.len() as u64 > max {
        return refuse(buf.len() as u64);
    }
    Ok(buf)
}

/// At most `len` bytes from the start of `file`.
pub(crate) fn head(file: &File, len: usize) -> Result<Vec<u8>> {
    bounded(file, len as u64, len as u64)
}

/// Reads `file` to its end or to `limit` bytes, reserving at most
/// `READ_RESERVE` of the `hint` up front.
fn bounded(file: &File, limit: u64, hint: u64) -> Result<Vec<u8>> {
    // One byte past the hint: a read that ends there needs no second look.
    let reserve = hint.saturating_add(1).min(limit).min(READ_RESERVE);
    let mut buf = Vec::with_capacity(reserve as usize);
    file.take(limit)
        .read_to_end(&mut buf)
        .map_err(|e| Error::read(errno_of(&e)))?;
    Ok(buf)
}
