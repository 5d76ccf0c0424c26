//! Frames (docs/protocol.md, "Frames"): a u32 big-endian header length, a u32 big-endian payload
//! length, the JSON header, the raw payload.

use std::fmt;
use std::io::{self, Read};

/// Largest header accepted: a header is one small JSON message (the largest a client sends is an
/// exec's command and environment), so 1 MiB is far above any real one and bounds a hostile one.
pub const MAX_HEADER: u32 = 1 << 20;
/// Largest payload accepted: a whole file written in one `writeFile`; 1 GiB bounds what a hostile
/// length can make the server hold.
pub const MAX_PAYLOAD: u32 = 1 << 30;
/// The two length words before the header.
const PREFIX_BYTES: usize = 8;
/// A body is read in steps of at most this many bytes, so memory follows the bytes that actually
/// arrive, never the length a frame merely claims.
const READ_STEP: usize = 64 << 10;

/// One decoded frame: the header's bytes (not yet parsed) and the payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub header: Vec<u8>,
    pub payload: Vec<u8>,
}

/// Why no frame could be read.
#[derive(Debug)]
pub enum ReadError {
    /// The stream ended cleanly, between frames.
    Closed,
    /// The stream ended inside a frame.
    Truncated,
    /// A length out of range: the next frame cannot be found, so the connection must close.
    BadLength(String),
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Closed => f.write_str("input closed"),
            ReadError::Truncated => f.write_str("input closed inside a frame"),
            ReadError::BadLength(why) => f.write_str(why),
            ReadError::Io(e) => write!(f, "input error: {e}"),
        }
    }
}

/// Reads the next frame.
pub fn read_frame<R: Read>(input: &mut R) -> Result<Frame, ReadError> {
    let mut prefix = [0u8; PREFIX_BYTES];
    let mut got = 0;
    while got < PREFIX_BYTES {
        match input.read(&mut prefix[got..]) {
            Ok(0) if got == 0 => return Err(ReadError::Closed),
            Ok(0) => return Err(ReadError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    let header_len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let payload_len = u32::from_be_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
    if header_len == 0 || header_len > MAX_HEADER {
        return Err(ReadError::BadLength(format!(
            "frame header length {header_len} is out of range (1 to {MAX_HEADER} bytes)"
        )));
    }
    if payload_len > MAX_PAYLOAD {
        return Err(ReadError::BadLength(format!(
            "frame payload length {payload_len} is out of range (0 to {MAX_PAYLOAD} bytes)"
        )));
    }
    let header = read_body(input, header_len as usize)?;
    let payload = read_body(input, payload_len as usize)?;
    Ok(Frame { header, payload })
}

/// Reads exactly `len` bytes, growing the buffer as they arrive.
fn read_body<R: Read>(input: &mut R, len: usize) -> Result<Vec<u8>, ReadError> {
    let mut buf = Vec::new();
    while buf.len() < len {
        let start = buf.len();
        buf.resize(start + (len - start).min(READ_STEP), 0);
        let mut filled = start;
        while filled < buf.len() {
            match input.read(&mut buf[filled..]) {
                Ok(0) => return Err(ReadError::Truncated),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }
    Ok(buf)
}

/// The length prefix and header of a frame; the payload is written after it as is.
pub fn encode_head(header: &[u8], payload_len: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(PREFIX_BYTES + header.len());
    // Our own headers are small and payloads at most a file's or a chunk's size; `try_from`
    // saturating would only corrupt the stream, so an impossible size is clamped loudly in debug.
    debug_assert!(header.len() <= MAX_HEADER as usize);
    head.extend_from_slice(&(header.len() as u32).to_be_bytes());
    head.extend_from_slice(&(payload_len as u32).to_be_bytes());
    head.extend_from_slice(header);
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_bytes(header: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut bytes = encode_head(header, payload.len());
        bytes.extend_from_slice(payload);
        bytes
    }

    fn read_all(bytes: &[u8]) -> Vec<Result<Frame, String>> {
        let mut input = bytes;
        let mut out = Vec::new();
        loop {
            match read_frame(&mut input) {
                Ok(frame) => out.push(Ok(frame)),
                Err(ReadError::Closed) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn frames_round_trip() {
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut bytes = frame_bytes(br#"{"t":"call"}"#, b"");
        bytes.extend(frame_bytes(b"{}", &big));
        bytes.extend(frame_bytes(b"{\"x\":1}", b"\0\xff\n"));
        let frames = read_all(&bytes);
        assert_eq!(frames.len(), 3);
        let frame = |i: usize| frames[i].as_ref().expect("a frame");
        assert_eq!(frame(0).header, br#"{"t":"call"}"#);
        assert!(frame(0).payload.is_empty());
        assert_eq!(frame(1).payload, big);
        assert_eq!(frame(2).payload, b"\0\xff\n");
    }

    #[test]
    fn a_stream_cut_anywhere_inside_a_frame_is_truncated() {
        let bytes = frame_bytes(br#"{"t":"call","id":1}"#, b"payload");
        for cut in 1..bytes.len() {
            let frames = read_all(&bytes[..cut]);
            assert_eq!(frames.len(), 1, "cut at {cut}");
            assert_eq!(
                frames[0].as_ref().unwrap_err(),
                "input closed inside a frame"
            );
        }
        assert!(read_all(&[]).is_empty());
    }

    #[test]
    fn lengths_out_of_range_are_refused_before_anything_is_allocated() {
        let mut zero = vec![0, 0, 0, 0, 0, 0, 0, 0];
        zero.extend_from_slice(b"{}");
        let err = |bytes: &[u8]| read_all(bytes).remove(0).unwrap_err();
        assert!(err(&zero).contains("header length 0"));
        let huge_header = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(err(&huge_header).contains("header length 4294967295"));
        let over = (MAX_HEADER + 1).to_be_bytes();
        assert!(err(&[over[0], over[1], over[2], over[3], 0, 0, 0, 0]).contains("out of range"));
        let huge_payload = [0, 0, 0, 2, 0x40, 0, 0, 1];
        assert!(err(&huge_payload).contains("payload length 1073741825"));
        // The largest lengths allowed are not refused, only truncated when the bytes never come.
        let max = [0, 0x10, 0, 0, 0x40, 0, 0, 0];
        assert_eq!(err(&max), "input closed inside a frame");
    }
}
